"""Summary figures read off the per-epoch history: the selected predictor and interpolation.

Epoch 0 is the initialization, not a training checkpoint, so selection looks at epochs >= 1.
"""

from __future__ import annotations

from initmem_core.config import RunConfig
from initmem_core.vocabulary import (
    BEST_VAL_EPOCH,
    BEST_VAL_LOSS,
    BEST_VAL_TEST_ACC,
    BEST_VAL_TRAIN_ACC,
    FINAL_TEST_ACC,
    FIT,
    REPAIR_GAP,
    TAU_INTERP,
    TEST_ACC,
    TRAIN_ACC,
    VAL_ACC,
    VAL_LOSS,
)


def selected(history: list[dict[str, float]]) -> dict[str, float]:
    """The selected checkpoint's row: the lowest validation loss over epochs >= 1, the earliest on a tie."""
    return min((row for row in history if row["epoch"] >= 1), key=lambda row: (row[VAL_LOSS], row["epoch"]))


class BestValidationSelection:
    """The paper selects the checkpoint with the lowest validation loss.

    It also keeps which test examples were right at that checkpoint (on the device, no sync) and
    logs them as ``test_correct.json``, from which the report adds the test set's own sampling error
    to its intervals (intervals for the population, report/inference.py).
    """

    def __init__(self) -> None:
        self.best_loss: float | None = None
        self.best_epoch = 0
        self.test_correct = None  # bool tensor of the best epoch so far

    def compute(self, state) -> dict[str, float]:
        val_loss = state.figures.get(VAL_LOSS)
        # The same rule as summarize: lowest val loss over epochs >= 1, the earliest on a tie.
        if (
            state.epoch >= 1
            and val_loss is not None
            and state.test_correct is not None
            and (self.best_loss is None or val_loss < self.best_loss)
        ):
            self.best_loss, self.best_epoch, self.test_correct = val_loss, state.epoch, state.test_correct
        return {}

    def artifacts(self) -> dict[str, str]:
        if self.test_correct is None:
            return {}
        from initmem_core.tracking.correct_sets import ARTIFACT, encode

        return {ARTIFACT: encode(self.test_correct.cpu().numpy(), self.best_epoch)}

    def summarize(self, history: list[dict[str, float]]) -> dict[str, float]:
        best = selected(history)
        return {
            BEST_VAL_EPOCH: best["epoch"],
            BEST_VAL_LOSS: best[VAL_LOSS],
            BEST_VAL_TEST_ACC: best[TEST_ACC],
            BEST_VAL_TRAIN_ACC: best[TRAIN_ACC],
            FINAL_TEST_ACC: history[-1][TEST_ACC],
        }


class Interpolation:
    """tau_interp: first epoch with train accuracy >= ``--interp-threshold`` (0.995 by default).

    Train accuracy is the clean one (``train_acc``: eval mode, unaugmented training set), not the
    running train-mode accuracy of the epoch's batches (``train_acc_batch``): with BatchNorm the
    two differ by tens of points early on, and the repair gap compares eval-mode figures.

    Repair gap: validation accuracy at the final checkpoint minus at tau_interp. Both are left
    out when the run never interpolated, so the report can count such runs.

    Fit: whether the *selected* predictor fits its training set (1) or not (0), its clean training
    accuracy at the best-validation checkpoint at or above the threshold. Reaching the threshold
    once (tau_interp) is not enough: a run can interpolate and fall back, or be selected before
    it fits, and the paper's memory is a spread among selected predictors that fit
    (docs/STATISTICS.md, "Which runs fit").
    """

    def __init__(self, config: RunConfig):
        self.threshold = config.interp_threshold

    def summarize(self, history: list[dict[str, float]]) -> dict[str, float]:
        fit = {FIT: float(selected(history)[TRAIN_ACC] >= self.threshold)}
        trained = [row for row in history if row["epoch"] >= 1]
        reached = [row for row in trained if row[TRAIN_ACC] >= self.threshold]
        if not reached:
            return fit
        first = reached[0]
        return {TAU_INTERP: first["epoch"], REPAIR_GAP: trained[-1][VAL_ACC] - first[VAL_ACC], **fit}
