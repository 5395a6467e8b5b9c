"""Intervals in the report against hand computations: per-sigma t intervals, the resampled interval
of the paper's spread, the cross-fitted (debiased) spread, paired differences, and groups that did
not train. Their error rates are checked by simulation in tests/core/testing/test_calibration.py."""

from __future__ import annotations

import numpy as np
import pytest

from initmem_core import run
from initmem_core.config import RunConfig
from initmem_core.report.memory import build_report, mean_interval
from initmem_core.report.render import to_markdown
from initmem_core.tracking.correct_sets import ARTIFACT, decode, encode
from initmem_core.tracking.tracker import MemoryTracker
from tests.support.builders import record

T_975_1DF = 12.706204736  # the t table: two-sided 95%, one degree of freedom


def cell(sigma, seed, acc, opt="sgd", correct=None, classes=10):
    return record(
        RunConfig(opt=opt, sigma=sigma, seed=seed),
        acc,
        test_correct=None if correct is None else np.asarray(correct, dtype=bool),
        num_classes=classes,
    )


def test_per_sigma_interval_is_the_t_interval_over_seeds():
    low, high = mean_interval([80.0, 84.0])  # mean 82, standard error sqrt(8)/sqrt(2) = 2
    assert (low, high) == pytest.approx((82 - 2 * T_975_1DF, 82 + 2 * T_975_1DF))
    row = build_report([cell(0.5, 0, 0.80), cell(0.5, 1, 0.84), cell(1.0, 0, 0.9)]).rows[0]
    assert high > 100  # two seeds: the t interval reaches past 100, which no accuracy can
    assert (row.test_acc_lo, row.test_acc_hi) == pytest.approx((low, 100.0))


def test_paper_spread_interval_resamples_each_sigmas_runs_and_spans_the_hand_enumerated_draws():
    # sigma 0.5 means {80, 82, 84} w.p. 1/4, 1/2, 1/4; sigma 2 {60, 65, 70}: spreads from 10 to 24,
    # each end with probability 1/16 (more than the 2.5% tails).
    group = build_report([cell(0.5, 0, 0.80), cell(0.5, 1, 0.84), cell(2.0, 0, 0.60), cell(2.0, 1, 0.70)]).groups[0]
    assert group.spread == pytest.approx(17.0)
    assert (group.spread_lo, group.spread_hi) == pytest.approx((10.0, 24.0))


def test_debiased_spread_is_the_mean_gap_on_held_out_seeds_by_hand():
    # Seed 0 held out: seeds 1, 2 say best 0.5 (mean 85) and worst 2.0 (mean 80); seed 0's gap 82 - 78 = 4.
    # Seed 1 held out: seeds 0, 2 say best 0.5 (86), worst 2.0 (79); gap 84 - 81 = 3.
    # Seed 2 held out: seeds 0, 1 say best 0.5 (83), worst 2.0 (79.5); gap 86 - 79 = 7.  Mean 14/3.
    cells = [
        cell(0.5, 0, 0.82),
        cell(0.5, 1, 0.84),
        cell(0.5, 2, 0.86),
        cell(1.0, 0, 0.81),
        cell(1.0, 1, 0.83),
        cell(1.0, 2, 0.80),
        cell(2.0, 0, 0.78),
        cell(2.0, 1, 0.81),
        cell(2.0, 2, 0.79),
    ]
    group = build_report(cells).groups[0]
    assert group.spread == pytest.approx(84.0 - 79.333333, abs=1e-4)
    assert group.debiased_spread == pytest.approx(14 / 3)
    assert group.debiased_spread_lo < group.debiased_spread < group.debiased_spread_hi


def test_a_flat_group_is_debiased_to_about_zero_while_the_papers_spread_stays_positive():
    rng = np.random.default_rng(3)
    cells = [cell(s, seed, 0.9 + rng.normal(0, 0.01)) for s in (0.1, 0.5, 1.4, 2.5) for seed in range(6)]
    group = build_report(cells).groups[0]
    assert group.spread_lo > 0  # max - min of noise: "significant" by its own interval
    assert group.debiased_spread_lo < 0 < group.debiased_spread_hi
    assert group.debiased_spread < group.spread


def test_a_sigma_with_one_trained_run_is_named_and_left_out_of_the_debiased_spread():
    cells = [
        cell(s, seed, acc / 100)
        for s, acc in ((0.5, 90), (1.0, 88))
        for seed, acc in enumerate((acc, acc + 1, acc - 1, acc + 0.5))
    ] + [cell(2.0, 0, 0.50)]
    group = build_report(cells).groups[0]
    assert group.spread == pytest.approx(90.125 - 50.0)  # the paper's figure keeps every measured sigma
    assert "sigma 2: 1 trained run, fewer than 2, left out" in group.debiased_note
    assert group.debiased_spread == pytest.approx(2.0)  # over 0.5 and 1.0 only
    assert "sigma 2: 1 trained run" in to_markdown(build_report(cells))


def test_paired_difference_of_equal_groups_is_zero_and_its_interval_straddles_zero():
    accs = (
        (0.5, 0, 0.80),
        (0.5, 1, 0.84),
        (0.5, 2, 0.83),
        (0.5, 3, 0.81),
        (2.0, 0, 0.60),
        (2.0, 1, 0.70),
        (2.0, 2, 0.66),
        (2.0, 3, 0.64),
    )
    report = build_report([cell(s, seed, acc, opt=opt) for opt in ("sgd", "adam") for s, seed, acc in accs])
    (pair,) = report.pairs
    assert pair.spread_diff == 0.0 and pair.spread_diff_lo < 0 < pair.spread_diff_hi
    assert pair.spread_diff_hi == pytest.approx(-pair.spread_diff_lo)
    assert (pair.acc_diff, pair.pairs, pair.shared_sigmas) == (0.0, 8, 2)


def test_groups_are_compared_over_the_sigmas_both_measured():
    sgd = [
        cell(s, seed, acc / 100)
        for s, acc in ((0.1, 95), (0.5, 80), (1.4, 94), (2.5, 93))
        for seed, acc in enumerate((acc, acc + 0.5, acc - 0.5, acc + 0.2))
    ]
    adam = [
        cell(s, seed, (acc + 0.3 * seed) / 100, opt="adam") for s, acc in ((0.1, 94), (2.5, 93)) for seed in range(4)
    ]
    (pair,) = build_report(sgd + adam).pairs  # adam minus sgd, over 0.1 and 2.5 only: sgd's dip at 0.5 is not seen
    assert pair.shared_sigmas == 2
    assert pair.spread_diff == pytest.approx(1.0 - 2.0)


def test_too_few_seeds_is_said_instead_of_decided():
    cells = [cell(s, seed, acc) for s, seed, acc in ((0.5, 0, 0.80), (0.5, 1, 0.84), (2.0, 0, 0.60), (2.0, 1, 0.70))]
    report = build_report(cells + [cell(c.config.sigma, c.config.seed, 0.7, opt="adam") for c in cells])
    assert all(np.isnan(g.debiased_spread_lo) and "too few seeds" in g.debiased_note for g in report.groups)
    assert "too few seeds" in report.pairs[0].note and np.isnan(report.pairs[0].spread_diff_lo)


def test_paired_accuracy_difference_is_the_t_interval_over_equal_sigma_and_seed():
    cells = [
        cell(0.5, 0, 0.80),
        cell(0.5, 1, 0.84),
        cell(2.0, 0, 0.60),
        cell(2.0, 1, 0.70),
        cell(0.5, 0, 0.82, "adam"),
        cell(0.5, 1, 0.85, "adam"),
        cell(2.0, 0, 0.65, "adam"),
        cell(2.0, 1, 0.70, "adam"),
    ]
    (pair,) = build_report(cells).pairs  # groups sorted: opt=adam minus opt=sgd
    diffs = [2.0, 1.0, 5.0, 0.0]
    assert pair.a.endswith("adam") and pair.acc_diff == pytest.approx(2.0)
    assert (pair.acc_diff_lo, pair.acc_diff_hi) == pytest.approx(mean_interval(diffs))


def test_a_group_at_chance_did_not_train_and_reports_no_spread():
    cells = [cell(0.5, 0, 0.11, "timm:lion"), cell(2.0, 0, 0.09, "timm:lion"), cell(0.5, 0, 0.80), cell(2.0, 0, 0.60)]
    report = build_report(cells)
    lion = next(g for g in report.groups if "lion" in g.group)
    sgd = next(g for g in report.groups if "lion" not in g.group)
    assert lion.did_not_train and np.isnan(lion.spread) and np.isnan(lion.spread_lo)
    assert not sgd.did_not_train and sgd.spread == pytest.approx(20.0)
    assert report.pairs == []  # nothing to compare an untrained group with
    assert "did not train (best 11.0%)" in to_markdown(report)


def test_a_run_logs_which_test_examples_were_right_at_the_selected_checkpoint():
    tracker = MemoryTracker()
    result = run(
        data="synthetic:1x8x8-c4-n64",
        arch="resnet20",
        epochs=2,
        batch_size=32,
        threads=1,
        checkpoint_every=0,
        tracker=tracker,
    )
    correct = decode(tracker.texts[ARTIFACT])
    assert correct.shape == (16,)  # the synthetic test split
    assert correct.mean() == pytest.approx(result.summary["best_val_test_acc"])


def test_codec_round_trips_odd_lengths():
    bits = np.array([True, False, True, True, False, False, True, False, True])
    assert (decode(encode(bits, epoch=3)) == bits).all()
