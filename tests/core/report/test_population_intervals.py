"""Intervals for the population (the test set's own sampling error added from the runs' per-example
records) and ``seeds_needed``, against hand computations (report/inference.py). Their error rates
are measured by benchmarks/calibration.py and benchmarks/seeds_needed_check.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from initmem_core.config import RunConfig
from initmem_core.report.inference import (
    POPULATION,
    THIS_TEST_SET,
    AccuracyTable,
    SpreadDifference,
    SpreadEstimate,
    cross_fit_spread,
    example_contrast,
    sampling_variance,
    spread_difference,
)
from initmem_core.report.memory import build_report
from initmem_core.report.render import seeds_needed_cell, to_json, to_markdown
from tests.support.builders import record

SIGMAS = (0.1, 0.5, 1.4, 2.5)


def records_table(right: dict[float, np.ndarray], test_set="digits") -> AccuracyTable:
    """``right``: sigma -> (seeds, examples) booleans."""
    return AccuracyTable(
        {s: {k: 100 * float(r[k].mean()) for k in range(len(r))} for s, r in right.items()},
        {s: {k: r[k] for k in range(len(r))} for s, r in right.items()},
        test_set,
    )


def drawn(rng, truths=(97, 96, 95, 93), seeds=6, n=360, specific=1.5, difficulty=None):
    """Runs on one test set whose examples vary in difficulty (log-odds sd 3) and, by ``specific``,
    in what each sigma finds hard."""
    difficulty = rng.normal(0, 3.0, n) if difficulty is None else difficulty
    out = {}
    for sigma, acc in zip(SIGMAS, truths):
        logit = np.log(acc / (100 - acc)) + 2.0 + difficulty + rng.normal(0, specific, n)
        out[sigma] = rng.random((seeds, n)) < 1 / (1 + np.exp(-logit))
    return out


def test_the_contrast_and_the_flips_share_of_its_variance_by_hand():
    # Two sigmas of two runs, three examples; weights +1 and -1.
    right = {0.1: np.array([[1, 1, 0], [1, 0, 0]], bool), 2.5: np.array([[0, 1, 0], [0, 1, 1]], bool)}
    table = records_table(right)
    contrast, flips, why = example_contrast(table, (0.1, 2.5), (1.0, -1.0))
    assert why == "" and contrast == pytest.approx([100.0, -50.0, -50.0])  # 100 x (share at 0.1 - share at 2.5)
    # per example, k/(k-1) m(1-m) / k with k = 2: shares (1, .5, 0) and (0, 1, .5) -> (0, .25, 0) and (0, 0, .25),
    # each / (k - 1) = 1: mean over examples 1/12 each, weights squared 1: flips = 2/12 of 1e4
    assert flips == pytest.approx(1e4 * 2 / 12)
    variance, df = sampling_variance(contrast, flips)
    sample = np.var(contrast, ddof=1)  # 7500
    assert variance == pytest.approx((sample - flips) / 3)
    centred = contrast - contrast.mean()
    second, fourth = np.mean(centred**2), np.mean(centred**4)  # 5000 and 3.75e7
    assert df == pytest.approx(2 * (sample - flips) ** 2 / ((fourth - second**2) / 3))


def test_flips_alone_put_no_variance_in_and_a_shared_contrast_cancels():
    rng = np.random.default_rng(0)
    # every example equally hard: the variance of the contrast is the flips' own, on average
    excess = [
        sampling_variance(
            *example_contrast(
                records_table({s: rng.random((6, 360)) < 0.95 for s in SIGMAS[:2]}), SIGMAS[:2], (1.0, -1.0)
            )[:2]
        )[0]
        for _ in range(200)
    ]
    assert np.mean(excess) < 0.02  # pp^2, against about 0.5 pp^2 of seed-based variance
    same = drawn(rng)
    a, b = records_table(same), records_table(same)
    difference = spread_difference(a, b)
    assert difference.estimate == 0 and difference.test_set_var == 0  # what two groups share cancels
    assert difference.interval_for == POPULATION


def test_a_population_interval_is_wider_than_the_seeds_alone_and_says_what_it_is_for():
    rng = np.random.default_rng(1)
    table = records_table(drawn(rng))
    estimate = cross_fit_spread(table)
    assert estimate.interval_for == POPULATION and estimate.test_set_var > 0
    assert estimate.se == pytest.approx(math.hypot(estimate.seed_se, math.sqrt(estimate.test_set_var)))
    assert estimate.hi - estimate.lo > 2 * 1.96 * estimate.seed_se
    plain = cross_fit_spread(dict(table))  # no records: the interval for this test set, and why
    assert plain.interval_for == THIS_TEST_SET and plain.se == estimate.seed_se
    table.correct[0.1].pop(0)
    partial = cross_fit_spread(table)
    assert (
        partial.interval_for == THIS_TEST_SET
        and "1 of " in partial.scope_note
        and "test_correct.json" in partial.scope_note
    )


def test_population_coverage_on_a_shared_test_set_of_varying_difficulty():
    """The quick drift check of calibration.py's shared-test-set rows: a fresh test set per sweep,
    the truth a 5 pp population spread."""
    rng = np.random.default_rng(2)
    held = seeds_only = 0
    sweeps = 80
    for _ in range(sweeps):
        e = cross_fit_spread(records_table(drawn(rng, (97, 95, 94, 92))))
        held += e.lo <= 5 <= e.hi
        half = e.seed_se * stats.t.ppf(0.975, 20)
        seeds_only += e.estimate - half <= 5 <= e.estimate + half
    assert held / sweeps >= 0.9 and seeds_only / sweeps < held / sweeps  # 0.95 and 0.74 measured


def difference(estimate=1.0, seed_var=2.0, test_set_var=0.0, runs=6, lo=-0.5, hi=2.5) -> SpreadDifference:
    """A difference of two groups, each with one sigma's share of variance on ``runs`` trained runs."""
    part = SpreadEstimate(0, 0, 0, 1, 5, runs, SIGMAS, components=((1.0, runs - 1),))
    se = math.sqrt(seed_var + test_set_var)
    return SpreadDifference(
        part, part, estimate, lo, hi, SIGMAS, "", se, 10.0, seed_var, test_set_var, 1000.0 if test_set_var else math.inf
    )


def test_seeds_needed_is_the_fewest_seeds_with_80_percent_power():
    d = difference()
    seeds, text = d.seeds_needed()
    # variance 2 at 6 seeds -> 12 / seeds; normal approximation: 12 (1.96 + 0.84)^2 / 1^2 = 94
    assert 90 <= seeds <= 100 and f"{seeds} seeds" in text
    assert d.power_at(seeds) >= 0.8 > d.power_at(seeds - 1)
    se, df = d.se_df_at(seeds)
    assert se == pytest.approx(math.sqrt(12 / seeds)) and df == pytest.approx(2 * (seeds - 1))
    assert stats.nct.sf(stats.t.ppf(0.975, df), df, 1 / se) == pytest.approx(d.power_at(seeds))
    halved = difference(estimate=2.0).seeds_needed()[0]
    assert halved == pytest.approx(seeds / 4, abs=2)  # twice the difference, a quarter of the seeds


def test_seeds_needed_says_so_when_no_count_would_do_or_nothing_is_needed():
    assert difference(lo=0.2).seeds_needed() == (None, "resolved")
    # the test set's own variance (sd 1 pp) does not shrink with seeds: a 1 pp difference stays out of reach
    seeds, text = difference(test_set_var=1.0).seeds_needed()
    assert seeds is None and "not within 200 seeds" in text and "test set" in text
    seeds, text = difference(estimate=0.05).seeds_needed()
    assert seeds is None and "too close to zero" in text
    undecided = SpreadDifference(
        difference().a, difference().a, 1.0, math.nan, math.nan, SIGMAS, "too few seeds to decide (2 < 3)"
    )
    assert undecided.seeds_needed()[0] is None and "at least 3 seeds" in undecided.seeds_needed()[1]


def test_the_report_shows_seeds_needed_and_what_each_interval_is_for():
    rng = np.random.default_rng(3)
    difficulty = rng.normal(0, 3.0, 360)
    cells = []
    for opt, truths in (("sgd", (97, 96, 95, 93)), ("adam", (97, 96.5, 96, 95))):
        for sigma, right in drawn(rng, truths, seeds=4, difficulty=difficulty).items():
            cells += [
                record(RunConfig(opt=opt, sigma=sigma, seed=k), r.mean(), test_correct=r, num_classes=10)
                for k, r in enumerate(right)
            ]
    report = build_report(cells)
    (pair,) = json.loads(to_json(report))["pairs"]
    assert "seeds_needed" in pair and pair["interval_for"] == POPULATION
    assert all(g["debiased_interval_for"] == POPULATION for g in json.loads(to_json(report))["groups"])
    (p,) = report.pairs
    assert p.spread_diff_lo < 0 < p.spread_diff_hi  # not resolved (these seeded draws): a next step is shown
    assert (p.seeds_needed is None) == ("not within" in p.seeds_needed_note) and p.seeds_needed_note
    assert pair["seeds_needed"] == p.seeds_needed and pair["seeds_needed_note"] == p.seeds_needed_note
    shown = to_markdown(report)
    assert "seeds to resolve" in shown and seeds_needed_cell(p) in shown
    from initmem_core.report.description import description

    parent = description(report, "s", "1", "0" * 32, "view")  # the parent run's description
    assert "next step" in parent and seeds_needed_cell(p) in parent
    for cell in cells:
        cell.test_correct = None  # an older sweep: intervals for this test set, said so
    old = build_report(cells)
    assert old.pairs[0].interval_for == THIS_TEST_SET and "this test set only" in to_markdown(old)
