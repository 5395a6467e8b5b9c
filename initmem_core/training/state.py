"""The training state at a step boundary, as a checkpoint holds it, and how it is put back.

Everything the loop depends on is in it (the position, which the schedule's rates follow from;
model with BatchNorm buffers, optimizer, W0, clocks, history, the figures of the epoch in
progress, the data order, metric plugins' state, the selected checkpoint with its kept weights,
every random stream: ``capture_rng``), so a run resumed from it computes exactly what it would
have computed.
"""

from __future__ import annotations

import dataclasses
import random
import warnings
from dataclasses import dataclass
from typing import Any

import numpy
import torch

from initmem_core.contracts import Metric
from initmem_core.errors import RunWarning
from initmem_core.training.clocks import ForgettingClocks
from initmem_core.training.selection import SelectedCheckpoint
from initmem_core.training.setup import TrainingSetup


@dataclass
class EpochSums:
    """Training figures of the epoch in progress, accumulated on the device."""

    loss: torch.Tensor
    correct: torch.Tensor
    seen: int = 0

    @classmethod
    def zero(cls, device: torch.device) -> EpochSums:
        return cls(torch.zeros((), device=device), torch.zeros((), device=device, dtype=torch.long))


def _is_plain(value: Any) -> bool:
    """Data ``torch.load(weights_only=True)`` reads back."""
    if isinstance(value, dict):
        return all(isinstance(k, (str, int)) and _is_plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool, torch.Tensor))


def metric_states(metrics: dict[str, Metric]) -> dict[str, Any]:
    """Each metric plugin's state: its ``state_dict()`` if it has one, else its attributes when
    they are plain data (e.g. the per-layer table ``weight-norms`` accumulates)."""
    states = {}
    for name, metric in metrics.items():
        state = metric.state_dict() if hasattr(metric, "state_dict") else dict(vars(metric))
        if _is_plain(state):
            states[name] = state
        else:
            warnings.warn(
                f"metric {name} keeps state that is not plain data, so a resumed run restarts it; "
                "give it state_dict()/load_state_dict()",
                RunWarning,
                stacklevel=2,
            )
    return states


def snapshot(
    setup: TrainingSetup,
    position: tuple[int, int],
    clocks: ForgettingClocks,
    history: list[dict[str, float]],
    sums: EpochSums,
    loader_state: dict[str, Any],
    selection: SelectedCheckpoint,
) -> dict[str, Any]:
    """The training state at a step boundary: ``position`` = (epochs done, steps into the next);
    ``loader_state`` = the data-order generator as it was when that next epoch began."""
    return {
        "epoch": position[0],
        "step": position[1],
        "model": setup.model.state_dict(),  # BatchNorm buffers included
        "optimizer": setup.optimizer.state_dict(),
        "initial_params": setup.initial_params,  # W0, which the memory metrics compare against
        "clocks": dataclasses.asdict(clocks),
        "history": history,  # best-validation selection and tau_interp are read off it
        "epoch_sums": {"loss": sums.loss, "correct": sums.correct, "seen": sums.seen},
        "loader": loader_state,
        "metrics": metric_states(setup.metrics),
        "rng": capture_rng(setup.device),
        "selected": selection.state_dict(),  # its weights too: scored on the whole test split at the end
    }


def restore(
    setup: TrainingSetup,
    state: dict[str, Any],
    clocks: ForgettingClocks,
    history: list[dict[str, float]],
    selection: SelectedCheckpoint,
) -> tuple[tuple[int, int], EpochSums]:
    """Put a ``snapshot`` back; returns its position and the sums of the epoch in progress."""
    device = setup.device
    setup.model.load_state_dict(state["model"])
    setup.optimizer.load_state_dict(state["optimizer"])
    with torch.no_grad():
        for name, value in state["initial_params"].items():
            setup.initial_params[name].copy_(value)
    for key, value in state["clocks"].items():
        setattr(clocks, key, value)
    history.extend(state["history"])
    setup.train_loader.load_state_dict(state["loader"])
    for name, metric_state in state["metrics"].items():
        metric = setup.metrics[name]
        if hasattr(metric, "load_state_dict"):
            metric.load_state_dict(metric_state)
        else:
            metric.__dict__.update(metric_state)
    if "selected" in state:
        selection.load_state_dict(state["selected"], device)
    else:  # written before the loop kept the selection: the selection metric's state had it
        legacy = [s for s in state["metrics"].values() if isinstance(s, dict) and "best_epoch" in s]
        selection.load_legacy(history, legacy[0] if legacy else None, device)
    sums = state["epoch_sums"]
    restore_rng(state["rng"], device)
    return (state["epoch"], state["step"]), EpochSums(sums["loss"].to(device), sums["correct"].to(device), sums["seen"])


def capture_rng(device: torch.device | None = None) -> dict[str, Any]:
    """Every generator a run draws from, as tensors so that ``weights_only`` loading reads them:
    torch's CPU one, Python's, NumPy's, and the CUDA one of the run's own ``device`` only (other
    GPUs of the process are not the run's, and a resume may see fewer of them)."""
    version, state, gauss = random.getstate()
    legacy = numpy.random.get_state(legacy=True)
    assert isinstance(legacy, tuple)  # the global RandomState is an MT19937, whose legacy state is a tuple
    kind, keys, position, has_gauss, cached = legacy
    captured = {
        "torch": torch.get_rng_state(),
        "python": {"version": version, "state": torch.tensor(state, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype("int64")),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
    }
    if device is not None and device.type == "cuda" and torch.cuda.is_initialized():
        captured["cuda"] = torch.cuda.get_rng_state(device)
    return captured


def restore_rng(captured: dict[str, Any], device: torch.device | None = None) -> None:
    """Put ``capture_rng``'s generators back; the CUDA state goes to the resumed run's own
    ``device``, whichever GPU that is (a run resumed on the CPU has no CUDA generator to set).
    A checkpoint from before this format holds every GPU's state by index: the run's was the
    current device's, GPU 0 of its process unless it said otherwise."""
    torch.set_rng_state(captured["torch"])
    python = captured["python"]
    random.setstate((python["version"], tuple(python["state"].tolist()), python["gauss"]))
    state = captured["numpy"]
    numpy.random.set_state(
        (state["kind"], state["keys"].numpy().astype("uint32"), state["position"], state["has_gauss"], state["cached"])
    )
    cuda = captured.get("cuda")
    if cuda is None or device is None or device.type != "cuda":
        return
    if isinstance(cuda, (list, tuple)):  # the earlier format: one state per visible GPU
        if not cuda:
            return
        cuda = cuda[0]
    torch.cuda.set_rng_state(cuda, device)
