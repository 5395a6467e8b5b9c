"""The training loop: a built ``TrainingSetup`` in, a per-epoch history and a summary out.

Kept lean on purpose: loss and accuracy accumulate on the device and the host reads them once
per epoch (the logging point). After every epoch the model is evaluated in eval mode on the
clean training set (``train_acc``, what tau_interp reads; ``--train-eval-size`` caps it), on
validation and on test: a forward pass over the training set costs about a third of a training
epoch (no backward, no augmentation, large batches); the forgetting clocks tick on host floats;
metric plugins run only at evaluation points, so nothing a plugin does costs time inside the step.

Reproducible to the bit: every random stream is seeded from ``config.seed`` (``seed_for``), and
a run stopped at any step boundary resumes from its checkpoint exactly (``training.state``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from initmem_core.contracts import EpochMetric, EvalState, SelectedPredictor, SummaryMetric, TakesSelected
from initmem_core.errors import RunWarning
from initmem_core.training.clocks import ForgettingClocks
from initmem_core.training.divergence import Diverged, LossGuard, all_finite
from initmem_core.training.loaders import FULL_TEST
from initmem_core.training.selection import SelectedCheckpoint, stopping
from initmem_core.training.setup import TrainingSetup
from initmem_core.training.state import EpochSums, restore, snapshot
from initmem_core.training.stop_signals import Stopped, StopSignals
from initmem_core.vocabulary import LR, STOP_EPOCH, TEST_ACC, TEST_LOSS, TRAIN_ACC, TRAIN_LOSS, VAL_ACC, VAL_LOSS

__all__ = ["evaluate_correct", "evaluation_row", "run_epoch", "score_selected", "train"]

History = list[dict[str, float]]
LogMetrics = Callable[[dict[str, float], int], None]
SaveCheckpoint = Callable[[dict[str, Any]], Any]


class Progress(Protocol):
    """Receives progress; the CLI draws it with rich."""

    def start(self, epochs: int, steps_per_epoch: int) -> None: ...
    def advance(self, steps: int) -> None: ...
    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None: ...


class NoProgress:
    def start(self, epochs, steps_per_epoch): ...
    def advance(self, steps): ...
    def epoch_done(self, epoch, metrics): ...


# -- evaluation ------------------------------------------------------------------------------


@torch.no_grad()
def evaluate_correct(setup: TrainingSetup, split: str) -> tuple[float, float, torch.Tensor]:
    """Mean loss, accuracy and which examples were right (a bool tensor on the device) on a
    split, in eval mode (BatchNorm on its running statistics), unaugmented, with large batches,
    through the model training uses: compiled, at its precision and memory format."""
    model = setup.model
    forward, autocast = setup.forward_pass()
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), device=setup.device)
    loader = setup.eval_loaders[split]
    right = []
    for xb, yb in loader:
        with autocast():
            logits = forward(xb.contiguous(memory_format=setup.memory_format)).float()
        loss_sum += F.cross_entropy(logits, yb, reduction="sum")
        right.append(logits.argmax(1) == yb)
    model.train(was_training)
    correct = torch.cat(right)
    n = loader.num_examples
    return loss_sum.item() / n, correct.sum().item() / n, correct


def evaluation_row(
    setup: TrainingSetup,
    epoch: int,
    history: History,
    clocks: ForgettingClocks,
    batch_figures: tuple[float, float] | None,
    lr: float,
    selection: SelectedCheckpoint,
    evaluated: Callable[[str], tuple[float, float, torch.Tensor]] | None = None,
) -> dict[str, float]:
    """Every figure logged at one evaluation point: the clean training set (``train_*``: eval
    mode, unaugmented, what tau_interp reads), the epoch's running train-mode figures
    (``train_*_batch``, none at epoch 0), the validation and test splits, each metric plugin's
    numbers, the clocks and the rate. ``selection`` is offered the point (it keeps it if its
    validation loss is the best so far). ``evaluated``: ``evaluate_correct`` of the three splits
    computed elsewhere (a lockstep job's fused pass)."""
    split = evaluated or (lambda name: evaluate_correct(setup, name))
    row = {}
    row[TRAIN_LOSS], row[TRAIN_ACC], _ = split("train")
    if batch_figures is not None:
        row["train_loss_batch"], row["train_acc_batch"] = batch_figures
    row[VAL_LOSS], row[VAL_ACC], _ = split("val")
    row[TEST_LOSS], row[TEST_ACC], test_correct = split("test")
    state = EvalState(
        setup.model,
        setup.initial_params,
        epoch,
        history,
        setup.config,
        setup.dataset,
        setup.device,
        evaluate=lambda split: evaluate_correct(setup, split)[:2],
        figures=dict(row),
        test_correct=test_correct,
    )
    for metric in setup.metrics.values():
        if isinstance(metric, EpochMetric):
            row.update(metric.compute(state))
    selection.offer(setup.model, epoch, row[VAL_LOSS], test_correct)
    row.update(clocks.as_metrics())
    row[LR] = lr
    if setup.regularizer is not None:
        with torch.no_grad():
            row["reg_penalty"] = float(setup.regularizer.penalty(*setup.penalized()))
    return row


def score_selected(setup: TrainingSetup, selection: SelectedCheckpoint, history: History) -> SelectedPredictor | None:
    """The selected checkpoint on the test split. When ``--eval-size`` capped the split scored
    every epoch, its kept weights are put in the model for one pass over the whole split (in eval
    mode, through ``evaluate_correct``: the forward and precision of every other evaluation), and
    the final weights put back; otherwise its evaluation point's own figures. ``None`` when no
    trained epoch was evaluated."""
    if selection.val_loss is None or selection.test_correct is None:
        return None
    row = next(row for row in history if row["epoch"] == selection.epoch)
    at_point = SelectedPredictor(
        selection.epoch, row[TEST_LOSS], row[TEST_ACC], selection.test_correct, len(selection.test_correct)
    )
    if FULL_TEST not in setup.eval_loaders:
        return at_point
    if selection.weights is None:  # resumed from a checkpoint of an initmem that kept no weights
        warnings.warn(
            f"the selected checkpoint (epoch {selection.epoch}) predates the checkpoint this run resumed "
            "from, which an earlier initmem wrote without its weights, so it is scored on the --eval-size "
            "subset only",
            RunWarning,
            stacklevel=3,
        )
        return at_point
    model = setup.model
    final = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    try:
        model.load_state_dict(selection.weights)  # in place: a compiled forward keeps its tensors
        loss, accuracy, correct = evaluate_correct(setup, FULL_TEST)
    finally:
        model.load_state_dict(final)
    return SelectedPredictor(selection.epoch, loss, accuracy, correct, len(correct), capped_test_acc=row[TEST_ACC])


# -- one epoch ------------------------------------------------------------------------------


class EpochInterrupted(Exception):
    """A stop was requested inside an epoch; ``step`` batches of it are done."""

    def __init__(self, step: int):
        self.step = step


def run_epoch(
    setup: TrainingSetup,
    epoch: int,
    step: int,
    sums: EpochSums,
    clocks: ForgettingClocks,
    guard: LossGuard,
    progress: Progress,
    stop: StopSignals,
) -> float:
    """Train epoch ``epoch`` from batch ``step`` on, adding into ``sums``; returns the last rate
    applied. Raises ``Diverged`` on a non-finite loss and ``EpochInterrupted`` when ``stop`` is
    requested before the epoch's last step (the caller checkpoints there)."""
    optimizer, rule = setup.optimizer, setup.plan.rule
    trainable, initial = setup.penalized()
    forward, autocast = setup.forward_pass()
    memory_format = setup.memory_format
    steps_per_epoch = len(setup.train_loader)
    lr = optimizer.param_groups[0]["lr"]
    for x, y in setup.train_loader.epoch(step):
        # One multiplier a step: the optimizer's rates, and the clocks on the plan's rule (as horizons replays it).
        multiplier = setup.scheduler.at((epoch - 1) * steps_per_epoch + step)
        lr = optimizer.param_groups[0]["lr"]  # the rate this step applies, as logged
        clocks.tick(rule.eta(multiplier), len(y), rule.shrink)
        with autocast():
            logits = forward(x.contiguous(memory_format=memory_format))
            loss = F.cross_entropy(logits.float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if setup.regularizer is not None:
            setup.regularizer.add_gradient(trainable, initial)
        optimizer.step()
        # Accumulate on the device: the host reads these once, at the end of the epoch.
        sums.loss += loss.detach() * len(y)
        sums.correct += (logits.argmax(1) == y).sum()
        sums.seen += len(y)
        step += 1
        progress.advance(1)
        if guard.tripped(loss):
            raise loss_diverged(guard, steps_per_epoch)
        if stop.requested and step < steps_per_epoch:
            raise EpochInterrupted(step)
    return lr


def loss_diverged(guard: LossGuard, steps_per_epoch: int) -> Diverged:
    """The run's first step whose loss was not finite, and its epoch (the guard may see it late)."""
    step = guard.bad_step()
    assert step is not None, "the loss guard tripped without a step"
    return Diverged((step - 1) // steps_per_epoch + 1, "the training loss", step=step)


def evaluated_at(epoch: int, config: Any) -> bool:
    """``--eval-every N``: the evaluation points are every N-th epoch and the last (and epoch 0)."""
    return epoch % config.eval_every == 0 or epoch == config.epochs


# -- the whole run --------------------------------------------------------------------------


def train(
    setup: TrainingSetup,
    log_metrics: LogMetrics,
    progress: Progress | None = None,
    *,
    save_checkpoint: SaveCheckpoint | None = None,
    resume_from: dict[str, Any] | None = None,
    stop: StopSignals | None = None,
) -> tuple[History, dict[str, float]]:
    """Train for ``config.epochs`` epochs, unless ``--patience`` stops it earlier (``selection.stopping``).
    ``log_metrics(metrics, step)`` gets every epoch's figures, from the initialization at step 0.
    Returns (history, summary).

    ``save_checkpoint(state)`` receives a ``snapshot`` (and returns where it saved it) every
    ``config.checkpoint_every`` epochs, after the last one, and when ``stop.requested`` turns
    true (checked after every step; the loop then raises ``Stopped``). ``resume_from``: such a
    state, to continue from exactly there. A non-finite loss or weight raises ``Diverged``
    before anything of that epoch is logged.
    """
    config = setup.config
    progress = progress or NoProgress()
    stop = stop or StopSignals()
    clocks = ForgettingClocks()
    history: History = []
    steps_per_epoch = len(setup.train_loader)
    # Its weights are kept only when they will be scored again, on the whole test split.
    selection = SelectedCheckpoint(keep_weights=FULL_TEST in setup.eval_loaders)

    def record(epoch: int, batch_figures: tuple[float, float] | None, lr: float) -> None:
        row = evaluation_row(setup, epoch, history, clocks, batch_figures, lr, selection)
        log_metrics(row, epoch)
        history.append({"epoch": epoch, **row})
        progress.epoch_done(epoch, row)

    def checkpoint(position: tuple[int, int], sums: EpochSums, loader_state: dict[str, Any]) -> str | None:
        """Where the checkpoint went, for the message of a stopped run; ``None``: none kept."""
        if save_checkpoint is None:
            return None
        return str(save_checkpoint(snapshot(setup, position, clocks, history, sums, loader_state, selection)))

    # Start: the initialization is evaluation point 0; a resumed run continues mid-epoch.
    progress.start(config.epochs, steps_per_epoch)
    done, step, sums = 0, 0, EpochSums.zero(setup.device)
    if resume_from is None:
        record(0, None, setup.optimizer.param_groups[0]["lr"])
    else:
        (done, step), sums = restore(setup, resume_from, clocks, history, selection)
        progress.advance(done * steps_per_epoch + step)
    guard = LossGuard(setup.device, start=done * steps_per_epoch + step)
    # A run killed after its last checkpoint, written where it stopped early, trains no further.
    last = config.epochs if stopping(config, setup.plan.min_epochs, history) is None else done

    setup.model.train()
    for epoch in range(done + 1, last + 1):
        # Train the epoch; a stop inside it checkpoints the position and the epoch's sums.
        loader_state = setup.train_loader.state_dict()  # as this epoch begins, before it draws
        try:
            lr = run_epoch(setup, epoch, step, sums, clocks, guard, progress, stop)
        except EpochInterrupted as interrupted:
            assert stop.signum is not None  # raised once a stop was requested, by that signal
            raise Stopped(stop.signum, checkpoint((epoch - 1, interrupted.step), sums, loader_state)) from None

        # Log the epoch: the one host sync for its training figures, after the divergence checks.
        reason = None
        if evaluated_at(epoch, config):
            if guard.bad_step() is not None:
                raise loss_diverged(guard, steps_per_epoch)
            train_loss = sums.loss.item() / sums.seen
            if not math.isfinite(train_loss):  # finite losses whose sum overflowed
                raise Diverged(epoch, "the training loss")
            if not all_finite(setup.model):
                raise Diverged(epoch, "a weight or BatchNorm statistic")
            record(epoch, (train_loss, sums.correct.item() / sums.seen), lr)
            reason = stopping(config, setup.plan.min_epochs, history)
        step, sums = 0, EpochSums.zero(setup.device)

        # Checkpoint on schedule, at the end (early or not), and before stopping on a signal.
        every = config.checkpoint_every
        saved = None
        if stop.requested or reason or (every and epoch % every == 0):
            saved = checkpoint((epoch, 0), sums, setup.train_loader.state_dict())
        if stop.requested:
            assert stop.signum is not None  # requested: a signal came
            raise Stopped(stop.signum, saved)
        if reason:
            progress.advance((config.epochs - epoch) * steps_per_epoch)  # the cap's steps it did not need
            break

    return history, summarize(setup, selection, history)


def summarize(setup: TrainingSetup, selection: SelectedCheckpoint, history: History) -> dict[str, float]:
    """The end of a run (a lockstep job's members' too): the epoch it stopped at; the selected
    checkpoint, scored on the whole test split where --eval-size capped it, goes to the metrics
    that take it; then the figures read off the whole history."""
    predictor = score_selected(setup, selection, history)
    summary: dict[str, float] = {STOP_EPOCH: history[-1]["epoch"]}
    for metric in setup.metrics.values():
        if predictor is not None and isinstance(metric, TakesSelected):
            metric.take_selected(predictor)
    for metric in setup.metrics.values():
        if isinstance(metric, SummaryMetric):
            summary.update(metric.summarize(history))
    return summary
