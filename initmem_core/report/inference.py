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

**Cross-fitted spread.** Hold out one run at every sigma; choose the best and the worst sigma by
the mean of the runs *not* held out, and measure the gap between those two sigmas on their held-out
runs. The held-out runs played no part in choosing the pair, so a group whose accuracy does not
depend on sigma has an estimate centred on zero; a real spread is slightly underestimated when its
best or worst sigma is nearly tied with another (choosing the runner-up costs only the small
difference between them). The estimate is the average of that gap over *every* way of holding out
one run per sigma, computed exactly rather than by enumeration: averaging over all the choices
(Rao-Blackwell) keeps the mean of a single choice and lowers its variance. Runs of one seed are
not tied together here (they are independent draws of noise at different sigmas), which also lets
a sigma with a failed run take part with the runs it has.

**Its interval.** The estimate's variance is not a textbook formula (the pair chosen can change from
sweep to sweep), so it is measured: ``REPLICATES`` tables of the same design (same sigmas, same
failed runs) are drawn with each sigma's observed mean and its own sd across seeds (each run's
draws centred and scaled to exactly that mean and sd, which removes most of the Monte Carlo error
of a finite number of draws), the estimate is recomputed on each by the same rule, and its sd over
the draws is the standard error. The t interval uses the Welch-Satterthwaite degrees of freedom of
the per-sigma variances that error rests on (each sigma weighted by how much it enters the estimate,
with its trained runs − 1), not the seeds − 1 of a plain t interval (too few to decide anything at
4 or 6 seeds). A seed effect shared by every sigma of a seed enters each sigma's sd, and the
simulation draws it as independent noise, as the estimate treats it.

**Differences of two groups** are taken over the sigmas both measured; the two estimates'
variances add (runs of the same seed in two groups, if correlated, only make this conservative).

A sigma with fewer than ``MIN_SEEDS_PER_SIGMA`` trained runs has no variance and is left out of
the estimate, and named as such; an estimate whose best or worst sigma has fewer than ``MIN_SEEDS``
trained runs is reported without an interval, as *too few seeds to decide*.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

NAN = float("nan")
LEVEL = 0.95
#: A sigma needs this many trained runs for a variance; below it the sigma is left out (and named).
MIN_SEEDS_PER_SIGMA = 2
#: Fewer trained runs than this at the best or worst sigma and the rule is not calibrated
#: (docs/STATISTICS.md): no interval.
MIN_SEEDS = 3
#: Noise draws behind a standard error, and the fixed seed that makes a report reproducible.
REPLICATES, SIMULATION_SEED = 2000, 0

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
    seeds: int  # trained runs behind the gap: the fewer of the best and the worst sigma's
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
    """(variance, degrees of freedom) of a sum of independent variance estimates ``(w*v, df)``,
    by the Welch-Satterthwaite formula: (sum w*v)^2 / sum((w*v)^2 / df)."""
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


def cross_fit_weights(table: Any) -> Any:
    """The cross-fitted spread as weights on ``table`` (..., sigmas, seeds), nan where a run is
    missing: the estimate is ``nansum(weights * table)``. Each run k of sigma j is held out with
    probability 1 / (runs at j), independently across sigmas; its weight is that probability times
    (P(j is chosen best) - P(j is chosen worst)) given its sigma's mean without it, the other
    sigmas' held-out runs drawn at random. Ties go to the first sigma, as ``argmax`` does, so a
    table with equal means everywhere weighs nothing: a gap of 0. Sigmas with fewer than two runs
    take no part."""
    import numpy as np

    present = ~np.isnan(table)
    runs = present.sum(-1)  # (..., sigmas)
    values = np.where(present, table, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        others = np.where(present & (runs[..., None] >= 2),
                          (values.sum(-1, keepdims=True) - values) / (runs[..., None] - 1), np.nan)
    sigmas = table.shape[-2]
    label = np.broadcast_to(np.arange(sigmas)[:, None], table.shape[-2:])
    usable = runs >= 2
    # For each run, how many runs of each other sigma its sigma's mean (without it) is above, and
    # below. One sort of all means per table counts them: ties are ordered by sigma so that the
    # first sigma wins, as argmax and argmin do; a missing run sorts last and is never counted.
    above = _runs_before(others, -label) / np.where(usable, runs, 1)[..., None, None, :]
    below = 1.0 - _runs_before(others, label) / np.where(usable, runs, 1)[..., None, None, :]
    skip = np.eye(sigmas, dtype=bool)[:, None, :] | ~usable[..., None, None, :]
    best = np.where(skip, 1.0, above).prod(-1)
    worst = np.where(skip, 1.0, below).prod(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        weights = np.where(np.isnan(others), 0.0, (best - worst) / runs[..., None])
    return weights


def _runs_before(means: Any, tie_order: Any) -> Any:
    """For ``means`` (..., sigmas, seeds), nan where missing: how many of each sigma's means come
    strictly before each mean in the order of (mean, ``tie_order``). Shape (..., sigmas, seeds,
    sigmas); runs of a sigma against itself are not meaningful and are masked by the caller."""
    import numpy as np

    *batch, sigmas, seeds = means.shape
    flat = means.reshape(-1, sigmas * seeds)
    ties = np.broadcast_to(tie_order, means.shape).reshape(-1, sigmas * seeds)
    order = np.lexsort((ties, flat), axis=-1)
    sigma_of = np.repeat(np.arange(sigmas), seeds)[order]
    one_hot = (sigma_of[..., None] == np.arange(sigmas)) & ~np.isnan(np.take_along_axis(flat, order, -1))[..., None]
    before_sorted = np.cumsum(one_hot, axis=1, dtype=np.int32) - one_hot  # strictly before each position
    before = np.empty_like(before_sorted)
    before[np.arange(len(flat))[:, None], order] = before_sorted
    return before.reshape(*batch, sigmas, seeds, sigmas)


def cross_fit(table: Any) -> Any:
    """The cross-fitted spread of ``table`` (..., sigmas, seeds): see ``cross_fit_weights``."""
    import numpy as np

    return np.nansum(cross_fit_weights(table) * table, axis=(-2, -1))


@functools.lru_cache(maxsize=32)
def _standard_noise(replicates: int, shape: tuple[int, ...], seed: int) -> Any:
    """Standard normal draws (replicates, *shape), each run's centred and scaled to mean 0, sd 1."""
    import numpy as np

    noise = np.random.default_rng(seed).standard_normal((replicates, *shape))
    noise = (noise - noise.mean(0)) / noise.std(0)
    noise.flags.writeable = False
    return noise


def noise_draws(table: Any, replicates: int = REPLICATES, seed: int = SIMULATION_SEED) -> tuple[Any, Any]:
    """The cross-fitted spread of ``replicates`` tables like ``table`` (same missing runs) whose
    runs are drawn around each sigma's mean with that sigma's own sd: what the estimate would
    be in other sweeps of the same design, choosing its pairs by the same rule. Each run's draws
    are centred and scaled so that, over the replicates, they have exactly that mean and sd.
    Also returns how much each sigma's variance weighs in those estimates (the mean over the
    replicates of its squared weights)."""
    import numpy as np

    means = np.nanmean(table, -1, keepdims=True)
    sds = np.nanstd(table, -1, ddof=1, keepdims=True)
    draws = np.where(np.isnan(table), np.nan, means + sds * _standard_noise(replicates, table.shape, seed))
    weights = cross_fit_weights(draws)
    estimates = np.nansum(weights * draws, axis=(-2, -1))
    return estimates, (weights ** 2).sum(-1).mean(0)


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
    return _spread_of_table(table.tobytes(), table.shape, kept, left_out, level)


@functools.lru_cache(maxsize=512)
def _spread_of_table(data: bytes, shape: tuple[int, int], kept: tuple[float, ...],
                     left_out: tuple[tuple[float, int], ...], level: float) -> SpreadEstimate:
    """``cross_fit_spread`` of one table, kept for the next caller: a report and its findings
    ask for the same groups' spreads over the same sigmas several times."""
    import numpy as np

    table = np.frombuffer(data, dtype=float).reshape(shape)
    estimate = float(cross_fit(table))
    means = np.nanmean(table, axis=1)
    counts = (~np.isnan(table)).sum(axis=1)
    seeds = int(min(counts[int(np.argmax(means))], counts[int(np.argmin(means))]))
    if seeds < MIN_SEEDS:
        return SpreadEstimate(estimate, NAN, NAN, NAN, NAN, seeds, kept, left_out,
                              f"too few seeds to decide ({seeds} < {MIN_SEEDS})")
    variances = np.nanvar(table, axis=1, ddof=1)
    draws, weights = noise_draws(table)
    components = tuple((float(weights[i] * variances[i]), int(counts[i] - 1))
                       for i in range(len(kept)) if weights[i] > 0)
    se = float(np.std(draws))
    df = satterthwaite(components)[1]
    low, high = interval_around(estimate, se, df, level)
    return SpreadEstimate(estimate, low, high, se, df, seeds, kept, left_out, "", components)


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
