"""train_acc is the eval-mode accuracy on the clean training set; the running train-mode figures
are train_*_batch; tau_interp and the repair gap follow the clean figure."""

from __future__ import annotations

import pytest
import torch

from initmem_core import RunConfig, run
from initmem_core.plugin_system.loader import get_registry
from initmem_core.tracking.tracker import MemoryTracker
from initmem_core.training.loaders import normalize
from initmem_plugins.metrics.selection import Interpolation
from tests.support.cli_processes import SYNTHETIC

SMALL = {**SYNTHETIC, "batch_size": 16, "epochs": 2}


def clean_accuracy(model: torch.nn.Module, config: RunConfig, keep: torch.Tensor | None = None) -> float:
    bundle = get_registry().build("dataset", config.data, config=config)
    x, y = bundle.train_x, bundle.train_y
    if keep is not None:
        x, y = x[keep], y[keep]
    model.eval()
    with torch.no_grad():
        images = normalize(
            x,
            torch.tensor(bundle.mean).view(1, -1, 1, 1),
            torch.tensor(bundle.std).view(1, -1, 1, 1),
            bundle.pixel_scale,
        )
        return (model(images).argmax(1) == y).float().mean().item()


def test_train_acc_is_the_eval_mode_accuracy_on_the_whole_clean_training_set():
    result = run(**SMALL, tracking=False)
    last = result.history[-1]
    assert last["train_acc"] == clean_accuracy(result.model, result.config)
    # The running figures are kept apart, from epoch 1 on (no batches before training).
    assert {"train_acc_batch", "train_loss_batch"} <= set(last)
    assert "train_acc_batch" not in result.history[0]


def test_train_eval_size_caps_the_clean_evaluation_and_is_logged():
    tracker = MemoryTracker()
    result = run(**SMALL, train_eval_size=20, tracker=tracker)
    assert tracker.params["train_eval_examples"] == 20
    assert tracker.params["train_eval_size"] == 20
    # Every value of a 20-example accuracy is a multiple of 1/20.
    assert all(round(row["train_acc"] * 20, 6) == round(row["train_acc"] * 20) for row in result.history)


def test_tau_interp_reads_the_clean_accuracy_not_the_running_one():
    history = [
        {"epoch": 0, "train_acc": 0.1, "val_acc": 0.1, "val_loss": 2.3},
        # The running train-mode accuracy interpolates at epoch 1; eval mode only at epoch 2.
        {"epoch": 1, "train_acc": 0.56, "train_acc_batch": 1.0, "val_acc": 0.50, "val_loss": 1.0},
        {"epoch": 2, "train_acc": 0.996, "train_acc_batch": 1.0, "val_acc": 0.70, "val_loss": 0.8},
        {"epoch": 3, "train_acc": 1.0, "train_acc_batch": 1.0, "val_acc": 0.75, "val_loss": 0.7},
    ]
    summary = Interpolation(RunConfig()).summarize(history)
    assert summary["tau_interp"] == 2
    assert summary["repair_gap"] == 0.75 - 0.70
    assert summary["fit"] == 1.0  # selected at epoch 3, at 100%


def rows(*figures: tuple[float, float]) -> list[dict[str, float]]:
    """A history from (clean training accuracy, validation loss) per epoch, epoch 0 first."""
    return [{"epoch": e, "train_acc": a, "val_acc": 0.5, "val_loss": v} for e, (a, v) in enumerate(figures)]


@pytest.mark.parametrize(
    "history, fit",
    [
        (rows((0.1, 2.3), (0.9, 0.5), (0.999, 0.6), (1.0, 0.7)), 0.0),  # selected at epoch 1, before it fit
        (rows((0.1, 2.3), (0.999, 0.9), (0.98, 0.5), (1.0, 0.7)), 0.0),  # fit at 1, fell back by the selection
        (rows((0.1, 2.3), (0.9, 0.9), (0.995, 0.5), (0.97, 0.7)), 1.0),  # at the threshold where selected
        (rows((0.1, 2.3), (0.6, 0.9), (0.7, 0.5)), 0.0),  # never fit: fit 0, and no tau_interp
    ],
)
def test_a_run_fit_when_its_selected_checkpoint_is_at_the_threshold_not_when_it_once_reached_it(history, fit):
    summary = Interpolation(RunConfig()).summarize(history)
    assert summary["fit"] == fit
    assert ("tau_interp" in summary) == any(row["train_acc"] >= 0.995 for row in history[1:])
