"""The selected predictor: the checkpoint of the lowest validation loss over epochs >= 1, the
earliest on a tie (the paper's model selection; epoch 0 is the initialization, not a trained
checkpoint). The rule is written here once: the loop follows it as training goes
(``SelectedCheckpoint``) and the selection metric reads it off the history (``selected``), as
``--patience`` does (``stopping``).

``--eval-size`` caps the validation and test splits scored at every evaluation point. The
selected checkpoint's own figure is worth the whole test split, so the loop keeps a copy of its
weights while it trains and scores them once, at the end, on every test example
(``loop.score_selected``); the capped per-epoch ``test_acc`` history stays as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from initmem_core.vocabulary import STOP_EPOCHS, STOP_PATIENCE, STOP_UNTIL, VAL_LOSS

if TYPE_CHECKING:  # torch is imported where it is used: the rule alone needs none (plugin summaries)
    import torch

__all__ = ["SelectedCheckpoint", "improves", "selected", "stopping"]


def selected(history: list[dict[str, float]]) -> dict[str, float]:
    """The selected checkpoint's row: the lowest validation loss over epochs >= 1, the earliest on a tie."""
    return min((row for row in history if row["epoch"] >= 1), key=lambda row: (row[VAL_LOSS], row["epoch"]))


def stopping(config: Any, min_epochs: int, history: list[dict[str, float]]) -> str | None:
    """Why a run whose ``history`` ends at an evaluation point stops there (``None``: it goes on): N
    (``--patience``) points after the selected one, at or past ``RunPlan.min_epochs`` (``--until``'s,
    the reason if reached last), or its last epoch. Read off the history: a resumed run stops alike."""
    epoch = int(history[-1]["epoch"])
    if config.patience and epoch >= max(1, min_epochs):
        best = selected(history)["epoch"]
        stale = sum(row["epoch"] > best for row in history)
        if stale >= config.patience:
            return STOP_UNTIL if config.until and stale > config.patience else STOP_PATIENCE
    if epoch >= config.epochs:
        return STOP_UNTIL if config.until and not config.patience else STOP_EPOCHS
    return None


def improves(epoch: int, val_loss: float, best_loss: float | None) -> bool:
    """Whether the evaluation point ``epoch`` becomes the selected checkpoint, points coming in
    order of epoch: ``selected``'s rule, applied one row at a time (a later tie does not win)."""
    return epoch >= 1 and (best_loss is None or val_loss < best_loss)


class SelectedCheckpoint:
    """The selected checkpoint so far, as the loop sees evaluation points: its epoch, validation
    loss and which test examples it got right (the split scored every epoch), and, when
    ``keep_weights``, a copy of its weights (parameters and BatchNorm buffers: everything
    ``state_dict`` holds) for the one scoring on the whole test split at the end.

    The copy stays on the training device: a device-to-device copy is queued like any kernel and
    runs at memory bandwidth, where a copy to host memory would make the host wait for the GPU
    at each improvement; it costs one more model's worth of device memory (MBs for these nets).
    Its buffers are allocated once and overwritten in place at each later improvement.
    """

    def __init__(self, keep_weights: bool):
        self.keep_weights = keep_weights
        self.epoch = 0
        self.val_loss: float | None = None
        self.test_correct: torch.Tensor | None = None
        self.weights: dict[str, torch.Tensor] | None = None

    def offer(self, model: torch.nn.Module, epoch: int, val_loss: float, test_correct: torch.Tensor) -> None:
        """Take evaluation point ``epoch`` if it improves on the selection."""
        if not improves(epoch, val_loss, self.val_loss):
            return
        self.epoch, self.val_loss, self.test_correct = epoch, val_loss, test_correct
        if self.keep_weights:
            import torch

            with torch.no_grad():
                state = model.state_dict()
                if self.weights is None or self.weights.keys() != state.keys():
                    self.weights = {name: tensor.detach().clone() for name, tensor in state.items()}
                else:
                    for name, tensor in state.items():
                        self.weights[name].copy_(tensor)

    def state_dict(self) -> dict[str, Any]:
        """Plain data for a checkpoint: a resumed run scores the same weights at the end."""
        return {
            "epoch": self.epoch,
            "val_loss": self.val_loss,
            "test_correct": self.test_correct,
            "weights": self.weights,
        }

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        self.epoch, self.val_loss = int(state["epoch"]), state["val_loss"]
        correct, weights = state.get("test_correct"), state.get("weights")
        self.test_correct = None if correct is None else correct.to(device)
        self.weights = None if weights is None else {name: value.to(device) for name, value in weights.items()}

    def load_legacy(
        self, history: list[dict[str, float]], metric_state: dict[str, Any] | None, device: torch.device
    ) -> None:
        """A checkpoint written before the loop kept the selection: its epoch and loss read off the
        history (the same rule), which test examples it got right from the selection metric's
        state of then, if it kept them (``best_epoch``, ``test_correct``). No weights were kept:
        unless a later epoch wins, ``weights`` stays ``None``."""
        if not any(row["epoch"] >= 1 for row in history):
            return
        best = selected(history)
        self.epoch, self.val_loss = int(best["epoch"]), float(best[VAL_LOSS])
        state = metric_state or {}
        correct = state.get("test_correct")
        if correct is not None and state.get("best_epoch") == self.epoch:
            self.test_correct = correct.to(device)
