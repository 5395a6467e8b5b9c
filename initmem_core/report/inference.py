"""Calibrated inference on spreads: how much a group's accuracy truly depends on sigma, and whether
one group's dependence is larger than another's.

The input is one group's accuracies (pp) per sigma and seed, trained runs only: a failed cell is
simply absent. Two facts shape the method (docs/STATISTICS.md has the simulations behind them):

* The paper's spread, max − min over sigma of the mean accuracy, is biased upward by noise: the
  sigma that looks best is partly the one whose seeds were lucky. A group that remembers nothing
  shows a spread of about 2 x (seed sd) / sqrt(seeds), always "significant".
* Seeds are the unit of replication. Everything that moves a run (which test examples it gets
  right, the data order a seed fixes) is already inside the seed-to-seed variation, so it is
  counted once, there, and never resampled a second time.

**Cross-fitted spread.** For each seed k, the best and the worst sigma are chosen on the *other*
seeds (their mean accuracies), and the gap between those two sigmas is measured on seed k alone.
The estimate is the mean of these held-out gaps. Seed k's noise played no part in choosing the
pair, so a group whose accuracy does not depend on sigma has an estimate centred on zero; a real
spread is slightly underestimated when its best or worst sigma is nearly tied with another
(choosing the runner-up costs only the small difference between them).

**Its interval.** The held-out gaps are not independent (each seed helped choose the others'
pairs) and the pair chosen can change from sweep to sweep, so the variance of their mean is
not a textbook formula. It is measured instead: ``REPLICATES`` tables of the same design (same
sigmas, same failed runs) are drawn with each sigma's observed mean and its own sd across seeds,
the estimate is recomputed on each by the same rule, and its sd over the draws is the standard
error. The t interval uses the Welch-Satterthwaite degrees of freedom of the per-sigma variances
that error rests on (the sigmas the gaps used, each with its trained runs − 1), not the m − 1 of
m held-out gaps (too few to decide anything at 4 or 6 seeds). A seed effect shared by every sigma
of a seed cancels in a gap but not in a sigma's sd: the interval is then conservative.

**Differences of two groups** are taken over the sigmas both measured; the two estimates'
variances add (runs of the same seed in two groups, if correlated, only make this conservative).

A sigma with fewer than ``MIN_SEEDS_PER_SIGMA`` trained runs has no variance and is left out of
the estimate, and named as such; an estimate from fewer than ``MIN_SEEDS`` held-out seeds is
reported without an interval, as *too few seeds to decide*.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

NAN = float("nan")
LEVEL = 0.95
#: A sigma needs this many trained runs for a variance; below it the sigma is left out (and named).
MIN_SEEDS_PER_SIGMA = 2
#: Fewer held-out seeds than this and the rule is not calibrated (docs/STATISTICS.md): no interval.
MIN_SEEDS = 3
#: Noise draws behind a standard error, and the fixed seed that makes a report reproducible.
REPLICATES, SIMULATION_SEED = 400, 0

#: accuracy (pp) by sigma, then by seed; trained runs only
Matrix = Mapping[float, Mapping[int, float]]


@dataclass(frozen=True)
class SpreadEstimate:
    """A cross-fitted spread (pp) and its t interval; ``reason`` says why an interval is missing."""

    estimate: float
    lo: float
    hi: float
    se: float
    df: float
    seeds: int  # held-out seeds that measured a gap
    sigmas: tuple[float, ...]  # the sigmas it was measured over
    #: (sigma, trained runs) of sigmas left out for too few trained runs
    too_few: tuple[tuple[float, int], ...] = ()
    reason: str = ""
    #: (weight x variance, degrees of freedom) of each sigma's share in the variance, for combining
    components: tuple[tuple[float, int], ...] = field(default=(), repr=False)

    @property
    def decided(self) -> bool:
        return not math.isnan(self.lo)


def t_quantile(df: float, level: float = LEVEL) -> float:
    from scipy import stats

    return float(stats.t.ppf(1 - (1 - level) / 2, df))


def satterthwaite(components: tuple[tuple[float, int], ...]) -> tuple[float, float]:
    """(variance, degrees of freedom) of a sum of independent variance estimates ``(w*v, df)``."""
    variance = sum(part for part, _ in components)
    denominator = sum(part * part / df for part, df in components if df > 0)
    return variance, (variance * variance / denominator if denominator > 0 else math.inf)


def mean_interval(values: list[float], level: float = LEVEL) -> tuple[float, float]:
    """The t interval of the mean of ``values`` (seeds) on len - 1 degrees of freedom; nan with
    fewer than two values."""
    if len(values) < 2:
        return NAN, NAN
    mean = sum(values) / len(values)
    sem = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))
    return interval_around(mean, sem, len(values) - 1, level)


def measured_sigmas(accuracy: Matrix, sigmas: tuple[float, ...] | None = None
                    ) -> tuple[tuple[float, ...], tuple[tuple[float, int], ...]]:
    """The sigmas with enough trained runs (of ``sigmas``, default all), and those left out."""
    wanted = sorted(accuracy) if sigmas is None else sorted(s for s in sigmas if s in accuracy)
    kept = tuple(s for s in wanted if len(accuracy[s]) >= MIN_SEEDS_PER_SIGMA)
    left_out = tuple((s, len(accuracy[s])) for s in wanted if len(accuracy[s]) < MIN_SEEDS_PER_SIGMA)
    return kept, left_out


def held_out_gaps(table: Any) -> tuple[Any, Any, Any]:
    """Cross-fitting on ``table`` (..., sigmas, seeds), nan where a run is missing: per seed, the
    best and worst sigma by the mean of the other seeds, and this seed's gap between them
    (nan when the seed misses either run, or fewer than two sigmas have other seeds). Returns
    (gaps, best, worst), each (..., seeds)."""
    import numpy as np

    present = ~np.isnan(table)
    values = np.where(present, table, 0.0)
    others = present.sum(-1, keepdims=True) - present
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(others > 0, (values.sum(-1, keepdims=True) - values) / others, np.nan)
    best = np.where(np.isnan(means), -np.inf, means).argmax(-2)
    worst = np.where(np.isnan(means), np.inf, means).argmin(-2)
    pick = lambda index: np.take_along_axis(table, index[..., None, :], -2)[..., 0, :]  # noqa: E731
    # Equal means everywhere make best and worst one sigma: a gap of 0, as a flat group should have.
    choosable = (~np.isnan(means)).sum(-2) >= 2
    gaps = np.where(choosable, pick(best) - pick(worst), np.nan)
    return gaps, best, worst


def noise_draws(table: Any, replicates: int = REPLICATES, seed: int = SIMULATION_SEED) -> tuple[Any, Any]:
    """The cross-fitted spread of ``replicates`` tables like ``table`` (same missing runs) whose
    runs are drawn around each sigma's mean with that sigma's own sd: what the estimate would
    be in other sweeps of the same design, choosing its pairs by the same rule. Also returns how
    much each sigma's variance weighs in those estimates (its share of the held-out gaps / m^2)."""
    import numpy as np

    means = np.nanmean(table, -1, keepdims=True)
    sds = np.nanstd(table, -1, ddof=1, keepdims=True)
    noise = np.random.default_rng(seed).standard_normal((replicates, *table.shape))
    draws = np.where(np.isnan(table), np.nan, means + sds * noise)
    gaps, best, worst = held_out_gaps(draws)
    measured = ~np.isnan(gaps)
    m = measured.sum(-1)
    sigmas = table.shape[0]
    uses = np.zeros((replicates, sigmas))
    for index in (best, worst):
        np.add.at(uses, (np.nonzero(measured)[0], index[measured]), 1.0)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a replicate whose seeds all miss a gap
        estimates = np.nanmean(gaps, -1)
        weights = np.nanmean(uses / (m[:, None] ** 2), 0)
    return estimates, weights


def as_table(accuracy: Matrix, sigmas: tuple[float, ...]) -> Any:
    import numpy as np

    seeds = sorted({seed for s in sigmas for seed in accuracy[s]})
    return np.array([[accuracy[s].get(seed, np.nan) for seed in seeds] for s in sigmas], dtype=float).reshape(
        len(sigmas), len(seeds))


def cross_fit_spread(accuracy: Matrix, sigmas: tuple[float, ...] | None = None,
                     level: float = LEVEL) -> SpreadEstimate:
    """The cross-fitted spread of one group over ``sigmas`` (default: every sigma it has)."""
    import numpy as np

    kept, left_out = measured_sigmas(accuracy, sigmas)
    if len(kept) < 2:
        return SpreadEstimate(NAN, NAN, NAN, NAN, NAN, 0, kept, left_out,
                              "fewer than two sigmas with enough trained runs")
    table = as_table(accuracy, kept)
    gaps = held_out_gaps(table)[0]
    measured = ~np.isnan(gaps)
    m = int(measured.sum())
    if m == 0:
        return SpreadEstimate(NAN, NAN, NAN, NAN, NAN, 0, kept, left_out,
                              "no seed was trained at a best and worst sigma")
    estimate = float(gaps[measured].mean())
    variances = np.nanvar(table, axis=1, ddof=1)
    counts = (~np.isnan(table)).sum(axis=1)
    if m < MIN_SEEDS:
        return SpreadEstimate(estimate, NAN, NAN, NAN, NAN, m, kept, left_out,
                              f"too few seeds to decide ({m} < {MIN_SEEDS})")
    draws, weights = noise_draws(table)
    components = tuple((float(weights[i] * variances[i]), int(counts[i] - 1))
                       for i in range(len(kept)) if weights[i] > 0)
    se = float(np.nanstd(draws))
    df = satterthwaite(components)[1]
    low, high = interval_around(estimate, se, df, level)
    return SpreadEstimate(estimate, low, high, se, df, m, kept, left_out, "", components)


def interval_around(estimate: float, se: float, df: float, level: float = LEVEL) -> tuple[float, float]:
    if se == 0:
        return estimate, estimate
    half = se * t_quantile(df if math.isfinite(df) else 1e9, level)
    return estimate - half, estimate + half


@dataclass(frozen=True)
class SpreadDifference:
    """Group a's cross-fitted spread minus group b's, over the sigmas both measured."""

    a: SpreadEstimate
    b: SpreadEstimate
    estimate: float
    lo: float
    hi: float
    sigmas: tuple[float, ...]
    reason: str = ""

    @property
    def decided(self) -> bool:
        return not math.isnan(self.lo)

    @property
    def se(self) -> float:
        return math.hypot(self.a.se, self.b.se)

    @property
    def df(self) -> float:
        return satterthwaite(self.a.components + self.b.components)[1]

    def interval_at(self, level: float) -> tuple[float, float]:
        """The interval at another level (a multiplicity-corrected one, say)."""
        if not self.decided:
            return NAN, NAN
        return _difference_interval(self.a, self.b, self.estimate, level)


def _difference_interval(a: SpreadEstimate, b: SpreadEstimate, estimate: float, level: float) -> tuple[float, float]:
    """Independent estimates: their standard errors add in quadrature, their variances' degrees
    of freedom combine by Welch-Satterthwaite."""
    return interval_around(estimate, math.hypot(a.se, b.se), satterthwaite(a.components + b.components)[1], level)


def spread_difference(a: Matrix, b: Matrix, level: float = LEVEL) -> SpreadDifference:
    """Cross-fitted spread of ``a`` minus that of ``b``, both over the sigmas they share (each with
    enough trained runs in both): like is compared with like. The two estimates are independent
    draws of noise (runs of one seed in both groups, if correlated, make the interval conservative)."""
    shared = tuple(sorted(set(measured_sigmas(a)[0]) & set(measured_sigmas(b)[0])))
    first, second = cross_fit_spread(a, shared, level), cross_fit_spread(b, shared, level)
    if len(shared) < 2:
        return SpreadDifference(first, second, NAN, NAN, NAN, shared,
                                f"they share {len(shared)} sigma(s) with enough trained runs")
    estimate = first.estimate - second.estimate
    reason = first.reason or second.reason
    if reason:
        return SpreadDifference(first, second, estimate, NAN, NAN, shared, reason)
    return SpreadDifference(first, second, estimate, *_difference_interval(first, second, estimate, level), shared)
