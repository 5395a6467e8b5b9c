"""Which runs fit: a record's ``fit`` read from what its run logged, from its training-accuracy
history, or (exports from before either was kept) from tau_interp and the final accuracy."""

from __future__ import annotations

from initmem_core.tracking.records import FIT_FROM_HISTORY, FIT_FROM_SUMMARY, FIT_LOGGED
from tests.support.builders import cell


def test_a_logged_fit_is_taken_as_logged():
    assert cell("sgd", 1.0, 0, fit=None, metrics={"fit": 1.0, "best_val_epoch": 3}).fit
    assert not cell("sgd", 1.0, 0, fit=False).fit
    found = cell("sgd", 1.0, 0, fit=None, metrics={"fit": 0.0, "tau_interp": 2, "best_val_epoch": 3, "train_acc": 1.0})
    assert not found.fit and found.fit_source == FIT_LOGGED  # logged wins over what the summary suggests


def test_without_the_flag_the_history_at_the_selected_epoch_decides():
    history = {"train_acc": [(0, 0.1), (1, 0.999), (2, 0.97), (3, 1.0)]}
    selected_after_a_dip = cell(
        "sgd", 1.0, 0, fit=None, metrics={"best_val_epoch": 2, "tau_interp": 1}, histories=history
    )
    assert selected_after_a_dip.fit_source == FIT_FROM_HISTORY and not selected_after_a_dip.fit
    assert cell("sgd", 1.0, 0, fit=None, metrics={"best_val_epoch": 3}, histories=history).fit


def test_an_old_record_fit_when_it_interpolated_by_its_selection_and_ended_fitted():
    def old(**metrics):
        return cell("sgd", 1.0, 0, fit=None, metrics={"best_val_epoch": 5, "train_acc": 1.0, **metrics})

    assert old(tau_interp=4).fit and old(tau_interp=4).fit_source == FIT_FROM_SUMMARY
    assert not old(tau_interp=6).fit  # selected before it fit
    assert not old().fit  # never interpolated
    assert not cell("sgd", 1.0, 0, fit=None, metrics={"best_val_epoch": 5, "tau_interp": 2, "train_acc": 0.9}).fit


def test_a_run_that_did_not_train_never_fit():
    assert not cell("sgd", 1.0, 0, fit=None, metrics={"fit": 1.0}, diverged=True).fit
    assert not cell("sgd", 1.0, 0, fit=None, metrics={"fit": 1.0}, status="FAILED").fit


def test_a_capped_run_scored_on_the_whole_split_shares_its_test_set_with_an_uncapped_one():
    from initmem_core.report.memory import accuracy_matrix

    whole = [cell("sgd", s, 0, 0.9, metrics={"test_examples": 10000}) for s in (0.5, 1.0)]
    capped = cell("sgd", 2.0, 0, 0.9)
    capped.config = capped.config.replace(eval_size=500)  # an export from before the whole-split scoring
    uncapped = cell("sgd", 2.0, 1, 0.9)
    assert accuracy_matrix([*whole, uncapped]).test_set is not None
    assert accuracy_matrix([*whole, capped]).test_set is None  # 500 images are another test set
