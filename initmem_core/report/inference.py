"""Calibrated inference on spreads: how much a group's accuracy truly depends on sigma, and whether
one group's dependence is larger than another's. docs/STATISTICS.md gives the method, why it is so,
and the simulations that measured its error rates; the section named beside each part here.

The input is one group's accuracy (pp) by sigma and seed, trained runs only (a failed cell is
absent). ``cross_fit_spread``: the cross-fitted spread, averaged exactly over every way of holding
out one run per sigma ("The debiased spread (cross-fitting)"); its standard error measured on
``REPLICATES`` noise draws of the same design, its t interval on Welch-Satterthwaite degrees of
freedom; and, where the runs logged which test examples they got right, the test set's own sampling
variance added, so that the interval is for the population ("For the population"). Without those
records the interval is for this test set, and says so. ``spread_difference``: two groups over the
sigmas both measured ("Comparing two groups"), and the seeds per sigma that would resolve it
("A next step for what did not resolve"). A sigma with fewer than ``MIN_SEEDS_PER_SIGMA`` trained
runs is left out and named; fewer than ``MIN_SEEDS`` at the best or worst sigma gives no interval.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from initmem_core.tracking.correct_sets import ARTIFACT as CORRECT_ARTIFACT

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
#: Power a planned sweep should have to resolve a difference, and the most seeds per sigma planned.
PLANNED_POWER, MOST_SEEDS = 0.8, 200
POPULATION, THIS_TEST_SET = "population", "this test set"


class AccuracyTable(dict):
    """A ``Matrix`` that also carries which test examples each run got right (``correct``: sigma ->
    seed -> bool array, for the runs that logged them) and which test set those are (``test_set``:
    equal for two groups scored on the same examples). A plain mapping has neither."""

    def scaled(self, factor: float) -> AccuracyTable:
        """Every accuracy times ``factor``, the records kept (each then counts ``factor`` times): a
        derived difference such as long − 0.5 × short stays an interval for the population."""
        return AccuracyTable(
            {sigma: {seed: factor * value for seed, value in runs.items()} for sigma, runs in self.items()},
            self.correct,
            self.test_set,
            self.scale * factor,
        )

    def __init__(
        self,
        accuracy: Matrix | None = None,
        correct: Mapping[float, Mapping[int, Any]] | None = None,
        test_set: Any = None,
        scale: float = 1.0,
    ):
        super().__init__({sigma: dict(runs) for sigma, runs in dict(accuracy or {}).items()})
        self.correct = {sigma: dict(runs) for sigma, runs in (correct or {}).items()}
        self.test_set = test_set
        #: what each run's accuracy was multiplied by (``scaled``): its per-example record counts that much
        self.scale = scale
        #: cross_fit_spread's answers, by table, sigmas, level and number of records (a report and
        #: its findings ask for one group's spread several times); records changed in place are not seen
        self.memo: dict = {}


class Interval:
    """What a spread and a difference of spreads share: a t interval, at 95% and at any level."""

    estimate: float
    lo: float
    se: float
    df: float

    @property
    def decided(self) -> bool:
        return not math.isnan(self.lo)

    def interval_at(self, level: float) -> tuple[float, float]:
        """The interval at another level (a multiplicity-corrected one, say)."""
        return interval_around(self.estimate, self.se, self.df, level) if self.decided else (NAN, NAN)


@dataclass(frozen=True)
class SpreadEstimate(Interval):
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
    #: (weight x variance, degrees of freedom) of each sigma's share in the seed-based variance
    components: tuple[tuple[float, int], ...] = field(default=(), repr=False)
    #: the standard error from the seeds alone: what the spread would vary by on this test set
    seed_se: float = NAN
    #: the test set's sampling variance in the estimate (pp^2) and its degrees of freedom (nan: unmeasured)
    test_set_var: float = NAN
    test_set_df: float = NAN
    interval_for: str = THIS_TEST_SET  # POPULATION when the test set's variance is in the interval
    scope_note: str = ""  # why the interval is for this test set only
    #: each sigma's net weight in the estimate (P(chosen best) - P(chosen worst), summed over its runs)
    sigma_weights: tuple[float, ...] = field(default=(), repr=False)
    #: per test example, the estimate's contrast (pp) and the runs' own flips' share of its variance
    contrast: Any = field(default=None, repr=False, compare=False)
    flip_variance: float = field(default=NAN, repr=False)


def t_quantile(df: float, level: float = LEVEL) -> float:
    # scipy.stats.t.ppf's own function, without its per-call checks (a millisecond; a calibration
    # calls this thousands of times) or the import of scipy.stats (most of a second per process)
    from scipy import special

    return float(special.stdtrit(df, 1 - (1 - level) / 2)) if df > 0 else math.nan


def satterthwaite(components: tuple[tuple[float, float], ...]) -> tuple[float, float]:
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


def measured_sigmas(
    accuracy: Matrix, sigmas: tuple[float, ...] | None = None
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
        others = np.where(
            present & (runs[..., None] >= 2), (values.sum(-1, keepdims=True) - values) / (runs[..., None] - 1), np.nan
        )
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
    """The cross-fitted spread of ``replicates`` tables like ``table`` (same missing runs), each run
    drawn around its sigma's mean with that sigma's sd, and each sigma's weight in their variance
    (the mean over the replicates of its squared weights)."""
    import numpy as np

    means = np.nanmean(table, -1, keepdims=True)
    sds = np.nanstd(table, -1, ddof=1, keepdims=True)
    draws = np.where(np.isnan(table), np.nan, means + sds * _standard_noise(replicates, table.shape, seed))
    weights = cross_fit_weights(draws)
    estimates = np.nansum(weights * draws, axis=(-2, -1))
    return estimates, (weights**2).sum(-1).mean(0)


def as_table(accuracy: Matrix, sigmas: tuple[float, ...]) -> Any:
    import numpy as np

    seeds = sorted({seed for s in sigmas for seed in accuracy[s]})
    return np.array([[accuracy[s].get(seed, np.nan) for seed in seeds] for s in sigmas], dtype=float).reshape(
        len(sigmas), len(seeds)
    )


def cross_fit_spread(accuracy: Matrix, sigmas: tuple[float, ...] | None = None, level: float = LEVEL) -> SpreadEstimate:
    """The cross-fitted spread of one group over ``sigmas`` (default: every sigma it has)."""

    kept, left_out = measured_sigmas(accuracy, sigmas)
    if len(kept) < 2:
        return SpreadEstimate(
            NAN, NAN, NAN, NAN, NAN, 0, kept, left_out, "fewer than two sigmas with enough trained runs"
        )
    table = as_table(accuracy, kept)
    found = _spread_of_table(table.tobytes(), table.shape, kept, left_out, level)
    if not found.decided:
        return found
    memo = getattr(accuracy, "memo", {})  # an AccuracyTable keeps its population intervals
    records = sum(len(runs) for runs in getattr(accuracy, "correct", {}).values())
    key = (table.tobytes(), kept, level, records, getattr(accuracy, "scale", 1.0))
    if key not in memo:
        memo[key] = _population(accuracy, found, level)
    return memo[key]


def _population(accuracy: Matrix, found: SpreadEstimate, level: float) -> SpreadEstimate:
    """``found`` (the seed-based estimate) with the test set's sampling variance added, or with
    a note saying why its interval is for this test set only."""
    contrast, flips, why = example_contrast(accuracy, found.sigmas, found.sigma_weights)
    if contrast is None:
        return replace(found, scope_note=f"95% interval for this test set only: {why}")
    variance, test_df = sampling_variance(contrast, flips)
    se = math.sqrt(found.seed_se**2 + variance)
    df = combined_df(found.components, found.seed_se**2, variance, test_df)
    low, high = interval_around(found.estimate, se, df, level)
    return replace(
        found,
        lo=low,
        hi=high,
        se=se,
        df=df,
        test_set_var=variance,
        test_set_df=test_df,
        interval_for=POPULATION,
        contrast=contrast,
        flip_variance=flips,
    )


def example_contrast(accuracy: Matrix, sigmas: tuple[float, ...], weights: tuple[float, ...]) -> tuple[Any, float, str]:
    """The estimate's per-example contrast (pp) and the share of its variance the runs' own flips put
    there (docs/STATISTICS.md, "For the population"); ``(None, nan, why)`` when a weighted sigma's
    runs did not all log their records."""
    import numpy as np

    correct = getattr(accuracy, "correct", None) or {}
    scale = getattr(accuracy, "scale", 1.0)  # a scaled table's records count that many times
    weighted = [(s, scale * w) for s, w in zip(sigmas, weights) if w != 0]
    runs = sum(len(accuracy[s]) for s, _ in weighted)
    missing = sum(1 for s, _ in weighted for seed in accuracy[s] if correct.get(s, {}).get(seed) is None)
    if missing:
        why = f"{missing} of {runs} runs logged no per-example record ({CORRECT_ARTIFACT})"
        return None, NAN, f"{why}, so the test set's own sampling error is not in it"
    lengths = {len(correct[s][seed]) for s, _ in weighted for seed in accuracy[s]}
    if len(lengths) != 1:
        return None, NAN, "the runs' per-example records differ in length (not one test set)"
    contrast, flips = np.zeros(lengths.pop()), 0.0
    for sigma, weight in weighted:
        right = np.stack([np.asarray(correct[sigma][seed], dtype=float) for seed in accuracy[sigma]])
        share = right.mean(0)
        k = len(right)
        contrast += weight * share
        flips += weight * weight * float((share * (1 - share)).mean()) / (k - 1)  # k/(k-1) m(1-m), over k
    return 100 * contrast, 1e4 * flips, ""


def sampling_variance(contrast: Any, flips: float) -> tuple[float, float]:
    """The test set's sampling variance in an estimate (pp^2), its per-example ``contrast``'s variance
    less the runs' own ``flips`` (at least 0), and that variance's degrees of freedom (from the
    contrast's fourth moment)."""
    import numpy as np

    n = len(contrast)
    if n < 2:
        return 0.0, math.inf
    sample = float(np.var(contrast, ddof=1))
    excess = max(sample - flips, 0.0)
    if excess == 0:
        return 0.0, math.inf
    centred = contrast - np.mean(contrast)
    second, fourth = float(np.mean(centred**2)), float(np.mean(centred**4))  # fourth >= second^2 always
    spread = (fourth - second * second) / n
    return excess / n, (2 * excess * excess / spread if spread > 0 else math.inf)


def rescaled(components: tuple[tuple[float, float], ...], seed_var: float) -> tuple[tuple[float, float], ...]:
    """The seed-based variance's ``components`` rescaled to sum to ``seed_var``, what the draws measured."""
    total = sum(part for part, _ in components)
    return tuple((part * seed_var / total if total > 0 else 0.0, df) for part, df in components)


def combined_df(components: tuple[tuple[float, float], ...], seed_var: float, test_var: float, test_df: float) -> float:
    """Welch-Satterthwaite degrees of freedom of the seed-based variance plus the test set's."""
    return satterthwaite(rescaled(components, seed_var) + (((test_var, test_df),) if test_var > 0 else ()))[1]


@functools.lru_cache(maxsize=512)
def _spread_of_table(
    data: bytes, shape: tuple[int, int], kept: tuple[float, ...], left_out: tuple[tuple[float, int], ...], level: float
) -> SpreadEstimate:
    """``cross_fit_spread`` of one table, cached: a report and its findings ask for it several times."""
    import numpy as np

    table = np.frombuffer(data, dtype=float).reshape(shape)
    weights_now = cross_fit_weights(table)
    estimate = float(np.nansum(weights_now * table))  # cross_fit(table)
    means = np.nanmean(table, axis=1)
    counts = (~np.isnan(table)).sum(axis=1)
    seeds = int(min(counts[int(np.argmax(means))], counts[int(np.argmin(means))]))
    if seeds < MIN_SEEDS:
        return SpreadEstimate(
            estimate, NAN, NAN, NAN, NAN, seeds, kept, left_out, f"too few seeds to decide ({seeds} < {MIN_SEEDS})"
        )
    variances = np.nanvar(table, axis=1, ddof=1)
    draws, weights = noise_draws(table)
    components = tuple(
        (float(weights[i] * variances[i]), int(counts[i] - 1)) for i in range(len(kept)) if weights[i] > 0
    )
    se = float(np.std(draws))
    df = satterthwaite(components)[1]
    low, high = interval_around(estimate, se, df, level)
    sigma_weights = tuple(float(w) for w in weights_now.sum(-1))
    return SpreadEstimate(
        estimate, low, high, se, df, seeds, kept, left_out, "", components, seed_se=se, sigma_weights=sigma_weights
    )


def interval_around(estimate: float, se: float, df: float, level: float = LEVEL) -> tuple[float, float]:
    if se == 0:
        return estimate, estimate
    half = se * t_quantile(df if math.isfinite(df) else 1e9, level)
    return estimate - half, estimate + half


@dataclass(frozen=True)
class SpreadDifference(Interval):
    """Group a's cross-fitted spread minus group b's, over the sigmas both measured."""

    a: SpreadEstimate
    b: SpreadEstimate
    estimate: float
    lo: float
    hi: float
    sigmas: tuple[float, ...]
    reason: str = ""
    se: float = NAN
    df: float = NAN
    #: the seed-based variance (pp^2) and the test set's (0: none measured) behind ``se``
    seed_var: float = NAN
    test_set_var: float = 0.0
    test_set_df: float = math.inf
    interval_for: str = THIS_TEST_SET
    scope_note: str = ""

    def se_df_at(self, seeds: Any) -> tuple[Any, Any]:
        """The standard error and degrees of freedom with ``seeds`` trained runs at every sigma (an
        array gives arrays): the seed-based variance shrinks, the test set's does not."""
        import numpy as np

        seeds = np.asarray(seeds, dtype=float)
        components = rescaled(self.a.components + self.b.components, self.seed_var)
        parts = [part * (df + 1) / seeds for part, df in components]  # df + 1: its trained runs
        variance = sum(parts) + self.test_set_var
        denominator = sum(part * part / (seeds - 1) for part in parts)
        if self.test_set_var > 0 and math.isfinite(self.test_set_df):
            denominator = denominator + self.test_set_var**2 / self.test_set_df
        with np.errstate(divide="ignore", invalid="ignore"):
            df = np.where(denominator > 0, variance * variance / denominator, np.inf)
        return np.sqrt(variance), df

    def power_at(self, seeds: Any, level: float = LEVEL) -> Any:
        """The chance that a sweep of ``seeds`` seeds resolves this difference if the true difference
        is the observed one (the noncentral t)."""
        import numpy as np
        from scipy import stats

        se, df = self.se_df_at(seeds)
        df = np.minimum(df, 1e6)
        critical = stats.t.ppf(1 - (1 - level) / 2, df)
        return stats.nct.sf(critical, df, abs(self.estimate) / se)

    def seeds_needed(self, power: float = PLANNED_POWER, most: int = MOST_SEEDS) -> tuple[int | None, str]:
        """The fewest seeds per sigma (``MIN_SEEDS`` to ``most``) that would resolve this difference
        with ``power`` if the true difference were the observed one, and a sentence saying so; ``None``
        and why when it is resolved, when no count would do, or with nothing to plan from."""
        import numpy as np

        if self.decided and (self.lo > 0 or self.hi < 0):
            return None, "resolved"
        if not self.decided:
            return None, (
                f"nothing to plan from ({self.reason}): run at least {MIN_SEEDS} seeds at every sigma, then ask again"
            )
        if self.estimate == 0:
            return None, f"the observed difference is 0: no number of seeds (up to {most}) would resolve it"
        counts = np.arange(MIN_SEEDS, most + 1)
        reached = np.flatnonzero(self.power_at(counts) >= power)
        if reached.size:
            seeds = int(counts[reached[0]])
            return seeds, (
                f"{seeds} seeds per sigma would resolve it with {power:.0%} power if the true difference "
                f"were the observed {self.estimate:+.2f} pp"
            )
        floor = math.sqrt(self.test_set_var)
        why = (
            f"the test set's own sampling error (sd {floor:.2f} pp) is too large for it: a larger test set would help"
            if floor > 0 and abs(self.estimate) < (1.96 + 0.84) * floor
            else "it is too close to zero"
        )
        return None, (
            f"not within {most} seeds: the observed difference {self.estimate:+.2f} pp "
            f"(standard error {self.se:.2f} pp) is too small to resolve with {power:.0%} power; {why}"
        )


def spread_difference(a: Matrix, b: Matrix, level: float = LEVEL) -> SpreadDifference:
    """Cross-fitted spread of ``a`` minus that of ``b`` over the sigmas both measured; on one test set
    the test set's variance is that of the difference of their contrasts (what they share cancels),
    on two the sum of each one's."""
    shared = tuple(sorted(set(measured_sigmas(a)[0]) & set(measured_sigmas(b)[0])))
    first, second = cross_fit_spread(a, shared, level), cross_fit_spread(b, shared, level)
    if len(shared) < 2:
        return SpreadDifference(
            first, second, NAN, NAN, NAN, shared, f"they share {len(shared)} sigma(s) with enough trained runs"
        )
    estimate = first.estimate - second.estimate
    reason = first.reason or second.reason
    if reason:
        return SpreadDifference(first, second, estimate, NAN, NAN, shared, reason)
    seed_var = first.seed_se**2 + second.seed_se**2
    test_var, test_df, scope, note = 0.0, math.inf, THIS_TEST_SET, ""
    if first.contrast is None or second.contrast is None:
        note = first.scope_note or second.scope_note
    elif getattr(a, "test_set", None) == getattr(b, "test_set", None) and len(first.contrast) == len(second.contrast):
        test_var, test_df = sampling_variance(
            first.contrast - second.contrast, first.flip_variance + second.flip_variance
        )
        scope = POPULATION
    else:  # two test sets, sampled independently
        parts = ((first.test_set_var, first.test_set_df), (second.test_set_var, second.test_set_df))
        test_var, test_df = satterthwaite(parts)
        scope = POPULATION
    se = math.sqrt(seed_var + test_var)
    df = combined_df(first.components + second.components, seed_var, test_var, test_df)
    low, high = interval_around(estimate, se, df, level)
    return SpreadDifference(
        first, second, estimate, low, high, shared, "", se, df, seed_var, test_var, test_df, scope, note
    )
