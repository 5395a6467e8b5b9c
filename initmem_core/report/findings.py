"""The paper's findings as checks on a sweep's results: each claim is one function returning a
``Finding`` with the numbers and a verdict.

The decision rule (docs/STATISTICS.md has the simulations that check its error rates): a
comparison of two groups is the difference of their *debiased* (cross-fitted) spreads over the
sigmas both measured, with its 95% t interval (``report/inference.py``). A claim is *reproduced*
when the interval of every comparison it makes excludes zero in the claimed direction (an
intersection-union test: its false-positive rate is at most one comparison's 2.5%); it is
*contradicted* when any one comparison of k excludes zero the other way at the Bonferroni level
1 − 0.05/k (so the chance that some comparison contradicts by noise stays at 2.5%); otherwise it is
*not resolved at this scale*. A comparison with too few seeds (``inference.MIN_SEEDS``) *cannot
be decided*, and the finding says so and why. Norm differences use t intervals over seeds with the
same rule; the clock ordering draws each group's debiased spread from its t distribution.

*Forgetting follows the clocks* compares half-lives (``report/forgetting.py``) within each family
of groups that share a mechanism and everything else but lr, batch size, lambda and horizon: per
seed, the sd over the family's groups of the log radial half-life in the mechanism's clock minus
that in epochs (log units make the two sds comparable), with a paired t interval over seeds;
claimed below zero in every family, decided by the same rule. A family whose radial memory does not
halve within the horizon (in every group, for at least ``MIN_SEEDS`` seeds) tests nothing: it is
named as left out, and with no family left the claim is not resolved.

Groups are recognised by their configuration, not by name: the *baseline SGD* group is plain SGD
(no momentum, no L2, no weight decay) at the sweep's most common batch size; *adaptive* groups are
Adam, AdamW and Muon at that batch size. Groups that did not train are left out. A claim whose
groups are missing is *not evaluated*, never reproduced.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from initmem_core.config import FIELDS
from initmem_core.groups import group_fields, group_keys, short_group_names
from initmem_core.report.inference import LEVEL, MIN_SEEDS, Matrix, SpreadDifference, interval_around, spread_difference
from initmem_core.report.memory import GroupSummary, Report, build_report, mean_interval, percentile_interval
from initmem_core.report.render import DASH, interval, number
from initmem_core.tracking.records import CellRecord
from initmem_core.vocabulary import CLOCK_ADAPT, CLOCK_L2, CLOCK_SGD, CLOCK_SYMBOLS, FINISHED

ADAPTIVE = ("adam", "adamw", "muon")
REPRODUCED, CONTRADICTED, NOT_RESOLVED, NOT_EVALUATED, CANNOT_DECIDE = (
    "reproduced",
    "contradicted",
    "not resolved at this scale",
    "not evaluated",
    "cannot be decided: too few seeds",
)
#: Draws of the groups' debiased spreads behind the clock ordering's interval, and their fixed seed.
CLOCK_DRAWS, CLOCK_DRAWS_SEED = 2000, 0


@dataclass
class Finding:
    claim: str
    measured: str
    verdict: str

    @property
    def reproduced(self) -> bool | None:
        """True: reproduced; False: contradicted; None: not resolved or not evaluated."""
        return {REPRODUCED: True, CONTRADICTED: False}.get(self.verdict)


def bonferroni_level(comparisons: int, level: float = LEVEL) -> float:
    """The level of each of ``comparisons`` intervals when any one of them decides."""
    return 1 - (1 - level) / max(comparisons, 1)


def decide(intervals: list[tuple[float, float]], against: list[tuple[float, float]] | None = None) -> str:
    """The verdict on differences each claimed to be above zero: reproduced when every 95%
    interval is above zero; contradicted when any of ``against`` (the same differences at the
    Bonferroni level, default ``intervals``) is below zero."""
    against = intervals if against is None else against
    if not intervals or any(math.isnan(low) or math.isnan(high) for low, high in intervals + against):
        return NOT_RESOLVED
    if any(high < 0 for _, high in against):
        return CONTRADICTED
    if all(low > 0 for low, _ in intervals):
        return REPRODUCED
    return NOT_RESOLVED


@dataclass
class _Group:
    summary: GroupSummary
    opt: str
    momentum: float
    l2: float
    weight_decay: float
    batch_size: int
    cells: list[CellRecord]
    accuracy: Matrix  # pp by sigma and seed, trained cells
    clock: float  # the clock that drives this group's forgetting (see forgetting_clock)

    def label(self) -> str:
        extra = "" if self.opt in ADAPTIVE else f" b={self.batch_size}"
        return f"{self.opt}{extra}{f' l2={self.l2:g}' if self.l2 else ''}"

    def spread_text(self) -> str:
        s = self.summary
        return (
            f"{self.label()} {s.spread:.2f} pp (debiased {s.debiased_spread:+.2f} "
            f"{interval(s.debiased_spread_lo, s.debiased_spread_hi)})"
        )


@dataclass
class Sweep:
    """What every claim reads: the report and the groups it can name."""

    report: Report
    groups: list[_Group]
    baseline: _Group | None
    adaptive: list[_Group]
    sgd: list[_Group]  # plain SGD at every batch size
    #: every group's cells, trained or not, by group key (the depth claim counts runs that never trained)
    cells: dict[str, list[CellRecord]] = field(default_factory=dict)


def forgetting_clock(opt: str, clock_sgd: float, clock_l2: float, clock_adapt: float) -> float:
    """Adaptive methods run on T_adapt; SGD forgets through its noise and its explicit decay, T_SGD + T_L2."""
    return clock_adapt if opt in ADAPTIVE else clock_sgd + clock_l2


def read_sweep(records: Iterable[CellRecord]) -> Sweep:
    records = list(records)
    report = build_report(records)
    keys = group_keys(r.config for r in records)
    cells: dict[str, list[CellRecord]] = {}
    for record, key in zip(records, keys):
        cells.setdefault(key, []).append(record)
    groups = []
    for summary in report.groups:
        if math.isnan(summary.spread):  # did not train, or one sigma: nothing to compare
            continue
        config = cells[summary.group][0].config
        groups.append(
            _Group(
                summary,
                config.opt,
                config.momentum,
                config.l2,
                config.weight_decay,
                config.batch_size,
                cells[summary.group],
                report.accuracy[summary.group],
                forgetting_clock(config.opt, summary.clock_sgd, summary.clock_l2, summary.clock_adapt),
            )
        )
    base_batch = Counter(g.batch_size for g in groups).most_common(1)[0][0] if groups else None
    sgd = sorted(
        (g for g in groups if g.opt == "sgd" and g.momentum == 0 and g.l2 == 0 and g.weight_decay == 0),
        key=lambda g: g.batch_size,
    )
    # Of several plain-SGD groups at that batch (rates or horizons compared), the lowest rate at the shortest horizon.
    baseline = min(
        (g for g in sgd if g.batch_size == base_batch),
        key=lambda g: (g.cells[0].config.lr, g.summary.clock_sgd),
        default=None,
    )
    adaptive = [g for g in groups if g.opt in ADAPTIVE and g.batch_size == base_batch and g.l2 == 0]
    return Sweep(report, groups, baseline, adaptive, sgd, cells)


def _spread_difference(a: _Group, b: _Group) -> tuple[str, SpreadDifference]:
    difference = spread_difference(a.accuracy, b.accuracy)
    over = f" over {len(difference.sigmas)} shared sigmas" if len(difference.sigmas) < len(a.accuracy) else ""
    shown = interval(difference.lo, difference.hi) if difference.decided else f"(no interval: {difference.reason})"
    estimate = number(difference.estimate, "+.2f", " pp")
    return f"{a.label()} − {b.label()}: {estimate} {shown}{over}", difference


def decide_differences(differences: list[SpreadDifference]) -> str:
    """The rule of the module docstring on spread differences each claimed to be above zero."""
    if any(not d.decided and "too few seeds" in d.reason for d in differences):
        return CANNOT_DECIDE
    corrected = bonferroni_level(len(differences))
    return decide([(d.lo, d.hi) for d in differences], [d.interval_at(corrected) for d in differences])


def _compare(claim: str, pairs: list[tuple[_Group, _Group]], shown: list[_Group]) -> Finding:
    """Claim: the spread of the first of each pair is above the second's."""
    if not pairs:
        return Finding(claim, "groups missing from the sweep", NOT_EVALUATED)
    differences = [_spread_difference(a, b) for a, b in pairs]
    measured = "; ".join(g.spread_text() for g in shown) + " | debiased " + "; ".join(text for text, _ in differences)
    return Finding(claim, measured, decide_differences([d for _, d in differences]))


def sgd_remembers_more_than_adaptive(sweep: Sweep) -> Finding:
    pairs = [(sweep.baseline, g) for g in sweep.adaptive] if sweep.baseline else []
    return _compare(
        "SGD's spread is larger than each adaptive optimizer's",
        pairs,
        [sweep.baseline, *sweep.adaptive] if sweep.baseline else [],
    )


def l2_shrinks_sgd_spread(sweep: Sweep) -> Finding:
    base = sweep.baseline
    l2 = [
        g
        for g in sweep.groups
        if base and g.opt == "sgd" and g.momentum == 0 and g.l2 > 0 and g.batch_size == base.batch_size
    ]
    return _compare("L2 shrinks SGD's spread", [(base, g) for g in l2] if base else [], [base, *l2] if base else [])


def larger_batch_increases_spread(sweep: Sweep) -> Finding:
    """The plain-SGD groups that differ from the baseline in batch size only (same rate and
    horizon settings): the largest batch against the smallest."""
    base = sweep.baseline
    same = (
        [
            g
            for g in sweep.sgd
            if _settings(g.cells[0].config, ("batch_size",)) == _settings(base.cells[0].config, ("batch_size",))
        ]
        if base
        else []
    )
    ends = [(same[-1], same[0])] if len({g.batch_size for g in same}) >= 2 else []
    return _compare("A larger batch increases SGD's spread", ends, same)


def _settings(config: Any, free: tuple[str, ...]) -> tuple:
    """Every setting of ``config`` that tells groups apart (not execution knobs) but sigma, seed and ``free``."""
    return tuple(
        (name, repr(getattr(config, name)))
        for name, f in FIELDS.items()
        if f.metadata["hashed"] and name not in ("sigma", "seed", *free)
    )


def norm_forgetting(group: _Group) -> dict[int, float]:
    """Per seed, how far the final norm ratio across sigma moved from the initial one, in log
    scale: 0 = ||W|| at sigma_max / at sigma_min stayed what it was at initialization (radial
    memory), 1 = the final norms meet (a common scale), below 0 = they moved further apart."""
    by_seed: dict[int, dict[float, CellRecord]] = {}
    for cell in group.cells:
        if cell.trained and {"weight_norm", "weight_norm_ratio"} <= set(cell.metrics):
            by_seed.setdefault(cell.config.seed, {})[cell.config.sigma] = cell
    sigmas = sorted({c.config.sigma for c in group.cells})
    moved = {}
    for seed, cells in by_seed.items():
        low, high = cells.get(sigmas[0]), cells.get(sigmas[-1])
        if low is None or high is None or low is high:
            continue
        final = high.metrics["weight_norm"] / low.metrics["weight_norm"]
        initial = (high.metrics["weight_norm"] / high.metrics["weight_norm_ratio"]) / (
            low.metrics["weight_norm"] / low.metrics["weight_norm_ratio"]
        )
        if initial > 0 and final > 0 and abs(math.log(initial)) > 1e-12:
            moved[seed] = 1 - math.log(final) / math.log(initial)
    return moved


def norms_coupled_for_sgd_not_adaptive(sweep: Sweep) -> Finding:
    claim = "SGD's final ||W||_F stays coupled to sigma; adaptive methods' converge"
    if sweep.baseline is None or not sweep.adaptive:
        return Finding(claim, "groups missing from the sweep", NOT_EVALUATED)
    sgd = norm_forgetting(sweep.baseline)
    corrected = bonferroni_level(len(sweep.adaptive))
    parts, bounds, against, seeds = [], [], [], []
    for group in sweep.adaptive:
        theirs = norm_forgetting(group)
        differences = [theirs[s] - sgd[s] for s in sorted(set(sgd) & set(theirs))]  # paired by seed
        low, high = mean_interval(differences)
        bounds.append((low, high))
        against.append(mean_interval(differences, corrected))
        seeds.append(len(differences))
        mean = sum(differences) / len(differences) if differences else math.nan
        parts.append(f"{group.label()} − sgd: {mean:+.2f} {interval(low, high)} over {len(differences)} seeds")
    shown = "; ".join(
        f"{g.label()} {sum(m.values()) / len(m):.2f}" if (m := norm_forgetting(g)) else f"{g.label()} {DASH}"
        for g in [sweep.baseline, *sweep.adaptive]
    )
    measured = (
        "share of the initial log norm ratio (sigma_max/sigma_min) forgotten by the end, 0 = coupled: "
        f"{shown} | {'; '.join(parts)}"
    )
    verdict = CANNOT_DECIDE if min(seeds) < MIN_SEEDS else decide(bounds, against)
    return Finding(claim, measured, verdict)


def clocks_order_spreads(sweep: Sweep) -> Finding:
    claim = "The forgetting clocks order the groups as their spreads (larger clock, smaller spread)"
    groups = [g for g in sweep.groups if not math.isnan(g.summary.debiased_spread)]
    if len(groups) < 3:
        return Finding(claim, "groups missing from the sweep", NOT_EVALUATED)
    import numpy as np
    from scipy import stats

    clocks = [g.clock for g in groups]

    def rho(spreads: Any) -> float:
        if len(set(clocks)) < 2 or len(set(np.round(spreads, 12))) < 2 or np.isnan(spreads).any():
            return math.nan
        return float(stats.spearmanr(clocks, spreads).statistic)  # average ranks for ties

    observed = rho(np.array([g.summary.debiased_spread for g in groups]))
    text = (
        f"Spearman rank correlation (ties averaged) of clock and debiased spread over {len(groups)} groups: "
        f"{observed:.2f}"
    )
    estimates = [sweep.report.estimates[g.summary.group] for g in groups]
    if any(not e.decided for e in estimates):
        return Finding(claim, text + " (no interval: a group has too few seeds)", CANNOT_DECIDE)
    # Each group's true debiased spread, drawn from its t distribution (independent groups).
    rng = np.random.default_rng(CLOCK_DRAWS_SEED)
    draws = np.stack(
        [e.estimate + e.se * rng.standard_t(e.df if math.isfinite(e.df) else 1e9, CLOCK_DRAWS) for e in estimates]
    )
    low, high = percentile_interval([rho(draws[:, b]) for b in range(CLOCK_DRAWS)])
    return Finding(claim, f"{text} {interval(low, high)}", decide([(-high, -low)]))  # claimed: below zero


def mechanism_clock(config: Any) -> str:
    """The clock of the mechanism by which a group forgets: adaptive methods T_adapt; SGD (and
    any other non-adaptive optimizer) with L2 or weight decay T_L2; without, T_SGD."""
    if config.opt in ADAPTIVE:
        return CLOCK_ADAPT
    return CLOCK_L2 if config.l2 + config.weight_decay > 0 else CLOCK_SGD


#: What may differ between the groups of one family: the settings the clocks account for.
FAMILY_FREE = ("lr", "batch_size", "l2", "weight_decay", "epochs", "until")


def clock_families(sweep: Sweep) -> dict[tuple, list[_Group]]:
    """Groups that share a mechanism and every setting but ``FAMILY_FREE``, families of two or
    more only, keyed by (mechanism clock, the settings they share)."""
    fields = [f for f in group_fields(g.cells[0].config for g in sweep.groups) if f not in FAMILY_FREE]
    families: dict[tuple, list[_Group]] = {}
    for group in sweep.groups:
        config = group.cells[0].config
        key = (mechanism_clock(config), tuple((f, getattr(config, f)) for f in fields))
        families.setdefault(key, []).append(group)
    return {key: groups for key, groups in families.items() if len(groups) >= 2}


def clock_agreement(groups: list[_Group], clock: str, forgetting: dict[str, Any]) -> tuple[dict[int, float], list[str]]:
    """Per seed with a radial half-life in every group of the family: the sd over groups of its
    log half-life in ``clock`` minus that in epochs. Also the groups with no half-life to offer."""
    per_group, missing = [], []
    for group in groups:
        found = forgetting.get(group.summary.group)
        seeds = found.seed_half_lives.get("radial", {}) if found else {}
        usable = {
            seed: units
            for seed, units in seeds.items()
            if units["epoch"] > 0 and units[clock] > 0 and not math.isnan(units[clock])
        }
        if not usable:
            missing.append(group.summary.group)
        per_group.append(usable)
    shared = sorted(set.intersection(*(set(g) for g in per_group))) if per_group else []
    return {
        seed: statistics.stdev([math.log(g[seed][clock]) for g in per_group])
        - statistics.stdev([math.log(g[seed]["epoch"]) for g in per_group])
        for seed in shared
    }, missing


def forgetting_follows_the_clocks(sweep: Sweep) -> Finding:
    """Decided over the families whose radial half-lives fall within the horizon (in every group,
    for at least ``MIN_SEEDS`` seeds); a family whose memory never halves says nothing either way
    and is named as left out. Too few trained seeds in a family: cannot be decided."""
    claim = (
        "Forgetting follows the clocks, not the epochs: radial half-lives agree better in the mechanism's "
        "clock than in epochs"
    )
    families = clock_families(sweep)
    if not families:
        return Finding(claim, "groups missing from the sweep", NOT_EVALUATED)
    if not sweep.report.forgetting:
        return Finding(claim, "no per-epoch histories in these records", NOT_EVALUATED)
    short = short_group_names([g.summary.group for g in sweep.groups])[0]
    measured, too_few = [], False
    for (clock, _), groups in families.items():
        differences, missing = clock_agreement(groups, clock, sweep.report.forgetting)
        trained_seeds = set.intersection(*({c.config.seed for c in g.cells if c.trained} for g in groups))
        too_few = too_few or len(trained_seeds) < MIN_SEEDS
        measured.append(
            (
                clock,
                [short[g.summary.group] for g in groups],
                list(differences.values()),
                [short[name] for name in missing],
            )
        )
    decidable = [m for m in measured if len(m[2]) >= MIN_SEEDS]
    corrected = bonferroni_level(len(decidable))
    parts, bounds, against = [], [], []
    for clock, names, values, missing in measured:
        family = f"{CLOCK_SYMBOLS[clock]} family [{', '.join(names)}]"
        if len(values) < MIN_SEEDS:
            why = (
                f"no radial half-life within the horizon in {', '.join(missing)}"
                if missing
                else f"half-lives in every group for {len(values)} seed(s)"
            )
            parts.append(f"{family}: left out ({why})")
            continue
        low, high = mean_interval(values)
        bounds.append((-high, -low))  # claimed below zero; decide() reads "above"
        c_low, c_high = mean_interval(values, corrected)
        against.append((-c_high, -c_low))
        parts.append(
            f"{family}: sd of log half-life in {CLOCK_SYMBOLS[clock]} − in epochs "
            f"{statistics.fmean(values):+.3f} {interval(low, high, '+.3f')} over {len(values)} seeds"
        )
    if too_few:
        verdict = CANNOT_DECIDE
    else:
        verdict = decide(bounds, against) if bounds else NOT_RESOLVED
    return Finding(claim, "; ".join(parts), verdict)


#: Training longer: the longer horizon must be at least this many times the shorter (in steps at
#: the same rate and batch: T_SGD), and keep at least ``KEPT_SHARE`` of the shorter one's spread.
LONGER, KEPT_SHARE = 5.0, 0.5
#: A larger learning rate: at least this many times the smaller one, at the same batch and horizon.
LARGER_LR = 3.0


def _family_ends(
    groups: list[_Group], free: tuple[str, ...], key: Callable[[_Group], float], ratio: float
) -> list[tuple[_Group, _Group]]:
    """Within each family of ``groups`` that differ only in ``free``: its (smallest, largest)
    by ``key``, where the largest is at least ``ratio`` times the smallest."""
    families: dict[tuple, list[_Group]] = {}
    for group in groups:
        families.setdefault(_settings(group.cells[0].config, free), []).append(group)
    ends = []
    for members in families.values():
        low, high = min(members, key=key), max(members, key=key)
        if low is not high and key(low) > 0 and key(high) >= ratio * key(low) * (1 - 1e-9):
            ends.append((low, high))
    return ends


def _scaled(accuracy: Matrix, factor: float) -> dict[float, dict[int, float]]:
    return {sigma: {seed: factor * value for seed, value in runs.items()} for sigma, runs in accuracy.items()}


def longer_training_keeps_sgd_memory(sweep: Sweep) -> Finding:
    """Plain-SGD groups that differ only in horizon (epochs or ``until``), the longest at least
    ``LONGER`` times the shortest: the long group's debiased spread is above zero, and it has kept
    at least ``KEPT_SHARE`` of the short group's (a non-inferiority test with a margin relative to
    the short spread: long − KEPT_SHARE × short > 0; the cross-fitted spread scales with the
    accuracies, so this is the spread difference of the long table and the scaled short one).
    Reproduced when both intervals exclude zero above it; contradicted when the long group has
    lost more than that share (the second difference below zero at the Bonferroni level)."""
    claim = (
        f"Training {LONGER:g}x longer keeps low-rate SGD's memory: its debiased spread stays above zero "
        f"and keeps at least {KEPT_SHARE:.0%} of the shorter horizon's"
    )
    pairs = _family_ends(sweep.sgd, ("epochs", "until"), lambda g: g.summary.clock_sgd, LONGER)
    if not pairs:
        return Finding(claim, "groups missing from the sweep", NOT_EVALUATED)
    parts, intervals, against, too_few = [], [], [], False
    corrected = bonferroni_level(2 * len(pairs))
    for short, long in pairs:
        estimate = sweep.report.estimates[long.summary.group]
        kept = spread_difference(long.accuracy, _scaled(short.accuracy, KEPT_SHARE))
        too_few = too_few or not estimate.decided or (not kept.decided and "too few seeds" in kept.reason)
        horizon = f"T_SGD {short.summary.clock_sgd:.3g} → {long.summary.clock_sgd:.3g}"
        parts.append(
            f"{short.label()} lr={short.cells[0].config.lr:g}, {horizon} "
            f"({long.summary.clock_sgd / short.summary.clock_sgd:.3g}x): "
            f"short {short.spread_text().split(' ', 2)[-1]}; long {long.spread_text().split(' ', 2)[-1]}"
            f" | long − {KEPT_SHARE:g} × short: {kept.estimate:+.2f} pp "
            + (interval(kept.lo, kept.hi) if kept.decided else f"(no interval: {kept.reason})")
        )
        intervals += [(estimate.lo, estimate.hi), (kept.lo, kept.hi)]
        against += [
            interval_around(estimate.estimate, estimate.se, estimate.df, corrected)
            if estimate.decided
            else (math.nan, math.nan),
            kept.interval_at(corrected),
        ]
    verdict = CANNOT_DECIDE if too_few else decide(intervals, against)
    return Finding(claim, "; ".join(parts), verdict)


def larger_lr_makes_sgd_forget(sweep: Sweep) -> Finding:
    """Plain-SGD groups that differ only in learning rate (same batch, same horizon settings), the
    largest at least ``LARGER_LR`` times the smallest: the small rate's debiased spread is above the
    large rate's."""
    claim = f"A larger learning rate ({LARGER_LR:g}x or more, same epochs) makes SGD forget: a smaller debiased spread"
    pairs = _family_ends(sweep.sgd, ("lr",), lambda g: g.cells[0].config.lr, LARGER_LR)
    if not pairs:
        return Finding(claim, "groups missing from the sweep", NOT_EVALUATED)
    differences = [spread_difference(low.accuracy, high.accuracy) for low, high in pairs]
    parts = []
    for (low, high), d in zip(pairs, differences):
        shown = interval(d.lo, d.hi) if d.decided else f"(no interval: {d.reason})"
        parts.append(
            f"{low.label()} lr={low.cells[0].config.lr:g} (T_SGD {low.summary.clock_sgd:.3g}) "
            f"{low.spread_text().split(' ', 2)[-1]}; lr={high.cells[0].config.lr:g} "
            f"(T_SGD {high.summary.clock_sgd:.3g}) {high.spread_text().split(' ', 2)[-1]} | "
            f"debiased lr={low.cells[0].config.lr:g} − lr={high.cells[0].config.lr:g}: "
            f"{d.estimate:+.2f} pp {shown}"
        )
    return Finding(claim, "; ".join(parts), decide_differences(differences))


#: The CIFAR ResNets by depth (He et al. 2016): the depth claim compares the shallowest with the deeper.
CIFAR_DEPTH = re.compile(r"resnet(20|32|44|56|110)$")


def interpolation_counts(cells: list[CellRecord], sigma: float) -> tuple[int, int]:
    """(runs that reached the interpolation threshold, runs that ran to the end or diverged) at ``sigma``:
    a diverged run did not interpolate; a cell that failed for another reason is left out."""
    ran = [c for c in cells if c.config.sigma == sigma and c.status == FINISHED]
    return sum(1 for c in ran if c.trained and "tau_interp" in c.metrics), len(ran)


def rate_difference(k1: int, n1: int, k2: int, n2: int, level: float = LEVEL) -> tuple[float, float]:
    """Newcombe's hybrid score interval (1998, method 10) for p1 − p2 of two independent binomial
    proportions, from each one's Wilson score interval: near its nominal coverage at small n, and
    defined at 0/n and n/n (where a Wald interval collapses). Runs of one seed in both, if
    correlated, only make it conservative."""
    from scipy import stats

    if min(n1, n2) == 0:
        return math.nan, math.nan
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = stats.binomtest(k1, n1).proportion_ci(level, method="wilson")
    l2, u2 = stats.binomtest(k2, n2).proportion_ci(level, method="wilson")
    return p1 - p2 - math.hypot(p1 - l1, u2 - p2), p1 - p2 + math.hypot(u1 - p1, p2 - l2)


def _plain_sgd(config: Any) -> bool:
    return config.opt == "sgd" and config.momentum == 0 and config.l2 == 0 and config.weight_decay == 0


def deep_nets_fail_to_interpolate(sweep: Sweep) -> Finding:
    """Plain-SGD groups (the paper's bad forgetting is low-rate SGD's) that differ only in
    architecture, among the CIFAR ResNets: for each deeper net, (a)
    at the largest sigma the shallowest net interpolates in a larger share of its runs, and (b)
    the deeper net itself interpolates in a larger share at the smallest sigma than at the largest
    (the failure is one of large sigma). Each share difference has Newcombe's interval
    (``rate_difference``); decided by the module's rule over all 2 × (deeper nets) comparisons.
    Reads every cell, trained or not (a group that never trained still counts its runs)."""
    claim = (
        "Deeper nets at the largest sigma interpolate in fewer runs than the shallowest by the same horizon, "
        "while at the smallest sigma they do"
    )
    families: dict[tuple, list[list[CellRecord]]] = {}
    for cells in sweep.cells.values():
        config = cells[0].config
        if CIFAR_DEPTH.match(config.arch) and _plain_sgd(config):
            families.setdefault(_settings(cells[0].config, ("arch",)), []).append(cells)

    def depth(cells: list[CellRecord]) -> int:
        match = CIFAR_DEPTH.match(cells[0].config.arch)
        assert match is not None  # families hold only architectures CIFAR_DEPTH matches
        return int(match.group(1))

    families = {k: sorted(v, key=depth) for k, v in families.items() if len({depth(c) for c in v}) >= 2}
    if not families:
        return Finding(claim, "groups missing from the sweep", NOT_EVALUATED)
    comparisons = []  # (text, k1, n1, k2, n2)
    shown = []
    for members in families.values():
        sigmas = sorted(set.intersection(*({c.config.sigma for c in cells} for cells in members)))
        if len(sigmas) < 2:
            continue
        low, high = sigmas[0], sigmas[-1]
        shallow = members[0]
        s_high = interpolation_counts(shallow, high)
        shown.append(
            "; ".join(
                f"{cells[0].config.arch}: {interpolation_counts(cells, low)[0]}/"
                f"{interpolation_counts(cells, low)[1]} at sigma {low:g}, "
                f"{interpolation_counts(cells, high)[0]}/{interpolation_counts(cells, high)[1]} "
                f"at sigma {high:g}"
                for cells in members
            )
        )
        for deep in members[1:]:
            d_low, d_high = interpolation_counts(deep, low), interpolation_counts(deep, high)
            name, base = deep[0].config.arch, shallow[0].config.arch
            comparisons.append((f"{base} − {name} at sigma {high:g}", *s_high, *d_high))
            comparisons.append((f"{name} at sigma {low:g} − at {high:g}", *d_low, *d_high))
    if not comparisons:
        return Finding(claim, "groups missing from the sweep (no two sigmas shared)", NOT_EVALUATED)
    corrected = bonferroni_level(len(comparisons))
    intervals = [rate_difference(k1, n1, k2, n2) for _, k1, n1, k2, n2 in comparisons]
    against = [rate_difference(k1, n1, k2, n2, corrected) for _, k1, n1, k2, n2 in comparisons]
    parts = [
        f"{text}: {k1 / n1 - k2 / n2:+.2f} {interval(lo, hi)}" if min(n1, n2) else f"{text}: no runs"
        for (text, k1, n1, k2, n2), (lo, hi) in zip(comparisons, intervals)
    ]
    measured = "runs that interpolated: " + " | ".join(shown) + " | share differences: " + "; ".join(parts)
    if any(min(n1, n2) < MIN_SEEDS for _, _, n1, _, n2 in comparisons):
        return Finding(claim, measured, CANNOT_DECIDE)
    return Finding(claim, measured, decide(intervals, against))


CLAIMS: tuple[Callable[[Sweep], Finding], ...] = (
    sgd_remembers_more_than_adaptive,
    l2_shrinks_sgd_spread,
    larger_batch_increases_spread,
    norms_coupled_for_sgd_not_adaptive,
    clocks_order_spreads,
    forgetting_follows_the_clocks,
    longer_training_keeps_sgd_memory,
    larger_lr_makes_sgd_forget,
    deep_nets_fail_to_interpolate,
)


def evaluate_findings(records: Iterable[CellRecord]) -> list[Finding]:
    sweep = read_sweep(records)
    return [claim(sweep) for claim in CLAIMS]
