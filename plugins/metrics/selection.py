"""Summary figures read off the per-epoch history: the selected predictor and interpolation.

Epoch 0 is the initialization, not a training checkpoint, so selection looks at epochs >= 1.
"""

from __future__ import annotations

from initmem_core.config import RunConfig


class BestValidationSelection:
    """The paper selects the checkpoint with the lowest validation loss."""

    def summarize(self, history: list[dict[str, float]]) -> dict[str, float]:
        trained = [row for row in history if row["epoch"] >= 1]
        best = min(trained, key=lambda row: (row["val_loss"], row["epoch"]))
        return {
            "best_val_epoch": best["epoch"],
            "best_val_loss": best["val_loss"],
            "best_val_test_acc": best["test_acc"],
            "final_test_acc": trained[-1]["test_acc"],
        }


class Interpolation:
    """tau_interp: first epoch with train accuracy >= ``--interp-threshold`` (0.995 by default).

    Repair gap: validation accuracy at the final checkpoint minus at tau_interp. Both are left
    out when the run never interpolated, so the report can count such runs.
    """

    def __init__(self, config: RunConfig):
        self.threshold = config.interp_threshold

    def summarize(self, history: list[dict[str, float]]) -> dict[str, float]:
        trained = [row for row in history if row["epoch"] >= 1]
        reached = [row for row in trained if row["train_acc"] >= self.threshold]
        if not reached:
            return {}
        first = reached[0]
        return {"tau_interp": first["epoch"], "repair_gap": trained[-1]["val_acc"] - first["val_acc"]}
