"""Intervals in the report against hand computations: per-sigma t intervals, the bootstrap over
seeds and test examples, paired differences, and groups that did not train."""

from __future__ import annotations

import numpy as np
import pytest

from initmem_core import run
from initmem_core.config import RunConfig
from initmem_core.report.memory import build_report, mean_interval, to_markdown
from initmem_core.tracking.correct_sets import ARTIFACT, decode, encode
from initmem_core.tracking.records import CellRecord
from initmem_core.tracking.tracker import MemoryTracker

T_975_1DF = 12.706204736  # the t table: two-sided 95%, one degree of freedom


def cell(sigma, seed, acc, opt="sgd", correct=None, classes=10):
    return CellRecord(RunConfig(opt=opt, sigma=sigma, seed=seed), metrics={"best_val_test_acc": acc},
                      test_correct=None if correct is None else np.asarray(correct, dtype=bool), num_classes=classes)


def test_per_sigma_interval_is_the_t_interval_over_seeds():
    low, high = mean_interval([80.0, 84.0])  # mean 82, standard error sqrt(8)/sqrt(2) = 2
    assert (low, high) == pytest.approx((82 - 2 * T_975_1DF, 82 + 2 * T_975_1DF))
    row = build_report([cell(0.5, 0, 0.80), cell(0.5, 1, 0.84), cell(1.0, 0, 0.9)]).rows[0]
    assert (row.test_acc_lo, row.test_acc_hi) == pytest.approx((low, high))


def test_seed_bootstrap_of_the_spread_spans_the_hand_enumerated_draws():
    # Seeds {0,0}: 80-60 = 20; {1,1}: 84-70 = 14; {0,1}: 82-65 = 17 (each 1/4, 1/4, 1/2 of draws).
    group = build_report([cell(0.5, 0, 0.80), cell(0.5, 1, 0.84), cell(2.0, 0, 0.60), cell(2.0, 1, 0.70)]).groups[0]
    assert group.spread == pytest.approx(17.0)
    assert (group.spread_lo, group.spread_hi) == pytest.approx((14.0, 20.0))


def test_test_example_bootstrap_keeps_a_certain_spread_certain_and_widens_a_noisy_one():
    n = 40
    certain = build_report([cell(0.5, 0, 1.0, correct=[1] * n), cell(2.0, 0, 0.0, correct=[0] * n, classes=0)])
    assert (certain.groups[0].spread_lo, certain.groups[0].spread_hi) == (100.0, 100.0)
    half = [1, 0] * (n // 2)  # 50% right, at both sigmas the same examples: spread 0 in every draw
    same = build_report([cell(0.5, 0, 0.5, correct=half), cell(2.0, 0, 0.5, correct=half)]).groups[0]
    assert (same.spread, same.spread_lo, same.spread_hi) == (0.0, 0.0, 0.0)
    other = [0, 1] * (n // 2)  # the complementary half: 50% each, yet resampling moves them apart
    noisy = build_report([cell(0.5, 0, 0.5, correct=half), cell(2.0, 0, 0.5, correct=other)]).groups[0]
    assert noisy.spread == 0.0 and noisy.spread_lo >= 0.0 and noisy.spread_hi > 10.0


def test_paired_differences_share_the_draws_so_equal_groups_differ_by_exactly_zero():
    cells = [cell(s, seed, acc, opt=opt) for opt in ("sgd", "adam")
             for s, seed, acc in ((0.5, 0, 0.80), (0.5, 1, 0.84), (2.0, 0, 0.60), (2.0, 1, 0.70))]
    report = build_report(cells)
    assert all(g.spread_hi - g.spread_lo == pytest.approx(6.0) for g in report.groups)
    (pair,) = report.pairs
    assert (pair.spread_diff, pair.spread_diff_lo, pair.spread_diff_hi) == (0.0, 0.0, 0.0)
    assert (pair.acc_diff, pair.pairs) == (0.0, 4)


def test_paired_accuracy_difference_is_the_t_interval_over_equal_sigma_and_seed():
    cells = [cell(0.5, 0, 0.80), cell(0.5, 1, 0.84), cell(2.0, 0, 0.60), cell(2.0, 1, 0.70),
             cell(0.5, 0, 0.82, "adam"), cell(0.5, 1, 0.85, "adam"), cell(2.0, 0, 0.65, "adam"),
             cell(2.0, 1, 0.70, "adam")]
    (pair,) = build_report(cells).pairs  # groups sorted: opt=adam minus opt=sgd
    diffs = [2.0, 1.0, 5.0, 0.0]
    assert pair.a.endswith("adam") and pair.acc_diff == pytest.approx(2.0)
    assert (pair.acc_diff_lo, pair.acc_diff_hi) == pytest.approx(mean_interval(diffs))


def test_a_group_at_chance_did_not_train_and_reports_no_spread():
    cells = [cell(0.5, 0, 0.11, "timm:lion"), cell(2.0, 0, 0.09, "timm:lion"),
             cell(0.5, 0, 0.80), cell(2.0, 0, 0.60)]
    report = build_report(cells)
    lion = next(g for g in report.groups if "lion" in g.group)
    sgd = next(g for g in report.groups if "lion" not in g.group)
    assert lion.did_not_train and np.isnan(lion.spread) and np.isnan(lion.spread_lo)
    assert not sgd.did_not_train and sgd.spread == pytest.approx(20.0)
    assert report.pairs == []  # nothing to compare an untrained group with
    assert "did not train (best 11.0%)" in to_markdown(report)


def test_a_run_logs_which_test_examples_were_right_at_the_selected_checkpoint():
    tracker = MemoryTracker()
    result = run(data="synthetic:1x8x8-c4-n64", arch="resnet20", epochs=2, batch_size=32, threads=1,
                 checkpoint_every=0, tracker=tracker)
    correct = decode(tracker.texts[ARTIFACT])
    assert correct.shape == (16,)  # the synthetic test split
    assert correct.mean() == pytest.approx(result.summary["best_val_test_acc"])


def test_codec_round_trips_odd_lengths():
    bits = np.array([True, False, True, True, False, False, True, False, True])
    assert (decode(encode(bits, epoch=3)) == bits).all()
