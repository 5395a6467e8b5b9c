"""The cross-fitted spread of report/inference.py: the exact average over every way of holding out
one run per sigma, its noise draws and its degrees of freedom."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from initmem_core.report.inference import _standard_noise, cross_fit, cross_fit_spread, noise_draws, satterthwaite


def by_enumeration(table: np.ndarray) -> float:
    """Hold out one run at every sigma in each possible way; choose best and worst sigma by the
    other runs' means (first sigma on ties, as argmax does); average the held-out gaps."""
    runs = [np.flatnonzero(~np.isnan(row)) for row in table]
    usable = [j for j, r in enumerate(runs) if len(r) >= 2]
    if len(usable) < 2:
        return 0.0
    gaps = []
    for held in itertools.product(*(runs[j] for j in usable)):
        means = [(np.nansum(table[j]) - table[j, k]) / (len(runs[j]) - 1) for j, k in zip(usable, held)]
        best, worst = int(np.argmax(means)), int(np.argmin(means))
        gaps.append(table[usable[best], held[best]] - table[usable[worst], held[worst]])
    return float(np.mean(gaps))


def test_the_estimate_is_the_average_over_every_held_out_choice_with_ties_and_missing_runs():
    rng = np.random.default_rng(0)
    tables = []
    for trial in range(150):
        table = np.round(rng.normal(0, 1, (rng.integers(2, 5), rng.integers(2, 6))) * 2) / 2  # ties on purpose
        table[rng.random(table.shape) < 0.15] = np.nan
        if trial % 5 == 0:
            table[~np.isnan(table)] = 1.0  # every mean equal: a gap of 0
        tables.append(table)
    for table in tables:
        assert cross_fit(table) == pytest.approx(by_enumeration(table), abs=1e-9)
    same_shape = np.stack([np.round(rng.normal(0, 1, (4, 5)) * 2) / 2 for _ in range(20)])
    assert cross_fit(same_shape) == pytest.approx([by_enumeration(t) for t in same_shape])  # batched alike


def test_a_clear_spread_is_the_gap_of_the_means_and_a_flat_group_is_centred_on_zero():
    clear = np.array([[97.0, 97.5, 96.5, 97.2], [90.0, 90.4, 89.6, 90.2]])
    assert cross_fit(clear) == pytest.approx(clear[0].mean() - clear[1].mean())
    rng = np.random.default_rng(1)
    flat = cross_fit(95 + rng.normal(0, 1, (4000, 4, 6)))
    paper = (95 + rng.normal(0, 1, (4000, 4, 6))).mean(-1)
    assert abs(flat.mean()) < 0.03 and (paper.max(-1) - paper.min(-1)).mean() > 0.8  # max - min is not


def test_averaging_over_every_choice_has_less_variance_than_holding_out_one_seed_everywhere():
    rng = np.random.default_rng(2)
    tables = 95 + rng.normal(0, 1, (3000, 4, 6))  # no memory: the choice of pair is at its least stable
    one_seed = []  # the earlier rule: seed k held out at every sigma at once
    for k in range(6):
        others = np.delete(tables, k, -1).mean(-1)
        pick = lambda index, k=k: np.take_along_axis(tables[..., k], index[:, None], -1)[:, 0]  # noqa: E731
        one_seed.append(pick(others.argmax(-1)) - pick(others.argmin(-1)))
    earlier = np.mean(one_seed, 0)
    now = cross_fit(tables)
    assert now.mean() == pytest.approx(earlier.mean(), abs=0.05)  # the same mean (Rao-Blackwell) ...
    assert now.std() < 0.96 * earlier.std()  # ... and less variance (0.945 measured)


def test_noise_draws_have_exactly_each_sigmas_mean_and_sd_and_keep_the_missing_runs():
    noise = _standard_noise(2000, (3, 4), 0)
    assert np.allclose(noise.mean(0), 0) and np.allclose(noise.std(0), 1)  # per run, over the draws
    table = np.array([[97.0, 96.0, 98.0, np.nan], [93.0, 95.0, 94.0, 92.0], [96.0, 95.5, 95.0, 96.5]])
    estimates, weights = noise_draws(table)
    assert estimates.shape == (2000,) and np.isfinite(estimates).all()
    assert weights[2] < weights[0] and weights[2] < weights[1]  # the middle sigma is rarely best or worst
    spread = cross_fit_spread(
        {s: {k: v for k, v in enumerate(row) if not np.isnan(v)} for s, row in zip((0.1, 1.0, 2.0), table)}
    )
    assert spread.se == pytest.approx(float(np.std(estimates)))
    assert spread.seeds == 3  # the best sigma (0.1) has three trained runs


def test_satterthwaite_degrees_of_freedom():
    assert satterthwaite(((2.0, 5),)) == (2.0, pytest.approx(5.0))  # one variance: its own degrees of freedom
    assert satterthwaite(((1.0, 5), (1.0, 5)))[1] == pytest.approx(10.0)  # two equal ones: their sum
    assert satterthwaite(((3.0, 2), (1.0, 8)))[1] == pytest.approx(16 / (9 / 2 + 1 / 8))
    assert satterthwaite(((1.0, 5), (0.0, 5)))[1] == pytest.approx(5.0)
