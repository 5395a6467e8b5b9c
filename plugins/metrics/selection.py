"""Summary figures read off the per-epoch history: the selected predictor and interpolation.

Epoch 0 is the initialization, not a training checkpoint, so selection looks at epochs >= 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from initmem_core.config import RunConfig
from initmem_core.training.selection import selected
from initmem_core.vocabulary import (
    BEST_VAL_EPOCH,
    BEST_VAL_LOSS,
    BEST_VAL_TEST_ACC,
    BEST_VAL_TEST_ACC_CAPPED,
    BEST_VAL_TRAIN_ACC,
    FINAL_TEST_ACC,
    FIT,
    REPAIR_GAP,
    TAU_INTERP,
    TEST_ACC,
    TEST_EXAMPLES,
    TRAIN_ACC,
    VAL_ACC,
    VAL_LOSS,
)

if TYPE_CHECKING:
    from initmem_core.contracts import SelectedPredictor

__all__ = ["BestValidationSelection", "Interpolation", "selected"]


class BestValidationSelection:
    """The paper selects the checkpoint with the lowest validation loss (the rule:
    ``initmem_core.training.selection``, which the loop follows while it trains).

    Its test accuracy (``best_val_test_acc``) and which test examples it got right, logged as
    ``test_correct.json`` (from which the report adds the test set's own sampling error to its
    intervals: report/inference.py), come from the loop's ``SelectedPredictor``: over the whole
    test split (``test_examples``), also when ``--eval-size`` capped the per-epoch ``test_acc``;
    then ``best_val_test_acc_capped`` is the capped subset's figure at the same checkpoint.
    """

    def __init__(self) -> None:
        self.predictor: SelectedPredictor | None = None

    def take_selected(self, predictor: SelectedPredictor) -> None:
        self.predictor = predictor

    def artifacts(self) -> dict[str, str]:
        if self.predictor is None:
            return {}
        from initmem_core.tracking.correct_sets import ARTIFACT, encode

        return {ARTIFACT: encode(self.predictor.test_correct.cpu().numpy(), self.predictor.epoch)}

    def summarize(self, history: list[dict[str, float]]) -> dict[str, float]:
        best = selected(history)
        summary = {
            BEST_VAL_EPOCH: best["epoch"],
            BEST_VAL_LOSS: best[VAL_LOSS],
            BEST_VAL_TEST_ACC: best[TEST_ACC],
            BEST_VAL_TRAIN_ACC: best[TRAIN_ACC],
            FINAL_TEST_ACC: history[-1][TEST_ACC],
        }
        predictor = self.predictor
        if predictor is not None and predictor.epoch == best["epoch"]:
            summary[BEST_VAL_TEST_ACC] = predictor.test_acc
            summary[TEST_EXAMPLES] = predictor.test_examples
            if predictor.capped_test_acc is not None:
                summary[BEST_VAL_TEST_ACC_CAPPED] = predictor.capped_test_acc
        return summary


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
