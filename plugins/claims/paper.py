"""The paper's claims (docs/PAPER.md, docs/PREREGISTRATION.md), each one function of the sweep view
(``Sweep``) returning a ``Finding`` with its numbers, the quantities it decided on and its verdict;
``initmem_plugins.claims`` registers each once (``declared.py``: its name, statement and what it
declares), and each reads that registration from the sweep view (``Sweep.claim``). They are written
with the claim API (``initmem_core.report.claim_api``: the strata, the verdict rule, the regime checks) and
the low-rate baseline (``baseline.py``), as any claim plugin is.

Comparisons of spreads use the *debiased* (cross-fitted) spread with its 95% interval for the
population of test examples (``report/inference.py``); a derived table (a share of a spread, a
scaled one) keeps the per-example records, so its interval is for the population too. Norm and
interpolation comparisons use intervals over seeds, the only thing that varies them.

**Margins, fixed here before any run** (docs/STATISTICS.md has their error rates and power):

- ``FORGOTTEN_SHARE``: a group *forgets* (adaptive optimizers, the strongest L2, the matched
  effective step) when its debiased spread is below a quarter of low-rate SGD's in the same
  stratum. Relative, not in pp: the paper's spreads are 26.5 pp on CIFAR-10 and ours a few points on
  digits, and "forgets" means "keeps little of what SGD keeps" at either scale; a quarter admits the
  paper's own reading of Muon (about 4 pp beside 26.5) and refuses Adam keeping 4 pp beside SGD's 8.
- ``KEPT_AT_LEAST``: training longer *does not reduce* the memory when the long horizon keeps at
  least three quarters of the short one's debiased spread (loses at most a quarter, the same
  margin); the old 50% non-inferiority stays as a note.
- ``COUPLED_AT_MOST`` / ``CONVERGED_AT_LEAST``: of the initial log norm ratio across sigma, SGD's
  final norms have forgotten at most a quarter (coupled) and each adaptive optimizer's at least
  three quarters (converged to a common scale); one verdict line per optimizer.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from typing import Any

from initmem_core.groups import group_fields
from initmem_core.report.claim_api import (
    ADAPTIVE_FAMILY,
    CANNOT_DECIDE,
    CLOCK_ADAPT,
    CLOCK_L2,
    CLOCK_SGD,
    CLOCK_SYMBOLS,
    MIN_SEEDS,
    NOT_EVALUATED,
    NOT_RESOLVED,
    SEEDS_ONLY,
    SGD_FAMILY,
    UNKNOWN_FAMILY,
    Check,
    Evaluated,
    Finding,
    Group,
    Quantity,
    Sweep,
    difference,
    from_seeds,
    from_spread,
    negated,
    per_stratum,
    settings,
    texts,
    verdict_of,
)
from initmem_core.report.claim_api import quantity_cell as quantity_text
from initmem_core.report.claim_groups import mechanism_clock, optimizer_family
from initmem_core.report.inference import LEVEL, AccuracyTable, Matrix
from initmem_core.report.memory import percentile_interval
from initmem_core.tracking.records import CellRecord
from initmem_core.vocabulary import FINISHED, TAU_INTERP, WEIGHT_NORM, WEIGHT_NORM_RATIO
from initmem_plugins.claims.baseline import baseline_sgd, is_plain_sgd, low_rate, low_rate_needs, plain_sgd
from initmem_plugins.claims.declared import (
    CONVERGED_AT_LEAST,
    COUPLED_AT_MOST,
    EQUAL_STEPS,
    FAMILY_FREE,
    FORGOTTEN_SHARE,
    KEPT_AT_LEAST,
    KEPT_HALF,
    LARGER_LR,
    LONGER,
)

#: Draws of the groups' debiased spreads behind a rank correlation's interval, and their fixed seed.
CLOCK_DRAWS, CLOCK_DRAWS_SEED = 2000, 0
#: The CIFAR ResNets by depth (He et al. 2016): the depth claim compares the shallowest with the deeper.
CIFAR_DEPTH = re.compile(r"resnet(20|32|44|56|110)$")


def scaled(accuracy: Matrix, factor: float) -> Matrix:
    """``accuracy`` times ``factor``, keeping the per-example records (``AccuracyTable.scaled``)."""
    if isinstance(accuracy, AccuracyTable):
        return accuracy.scaled(factor)
    return {sigma: {seed: factor * value for seed, value in runs.items()} for sigma, runs in accuracy.items()}


# -- the optimizers ---------------------------------------------------------------------------


def _adaptive(groups: list[Group]) -> list[Group]:
    return [g for g in groups if g.family == ADAPTIVE_FAMILY and g.config.l2 == 0]


def _momentum(groups: list[Group]) -> list[Group]:
    """SGD with momentum (no L2, no weight decay): an optimizer line of its own beside plain SGD and
    the adaptive ones, shown in the optimizer claims as notes (the paper states no claim about it)."""
    return [g for g in groups if g.family == SGD_FAMILY and g.config.momentum > 0 and g.shrink == 0]


def _adaptive_check(base: Group, adaptive: list[Group], converged: bool = True) -> Check:
    """Plain SGD and the adaptive groups must fit (and converge, where their spreads are read); each
    adaptive group's T_adapt must have run."""
    return Check.of([base, *adaptive], [(g, CLOCK_ADAPT) for g in adaptive], converged)


def adaptive_needs(sweep: Sweep) -> str:
    return low_rate_needs(
        sweep,
        "a plain low-rate SGD group and an adaptive one (Adam, AdamW, Muon, or any optimizer whose plugin "
        "declares the 'lr' clock) that differ in nothing but the optimizer and its settings",
    )


def sgd_keeps_memory(sweep: Sweep) -> Finding:
    """The paper's headline: low-rate plain SGD's debiased spread is above zero with every one of its
    runs fitting its training set (memory of sigma among predictors that all fit), in each stratum
    of the optimizer axis (its baseline group: ``baseline_sgd``)."""

    def evaluate(groups: list[Group]) -> Evaluated | None:
        # the baseline, not the effective-step control
        base = baseline_sgd(sweep, [g for g in groups if g.config.lr_match_sigma == 0])
        if base is None:
            return None
        quantities = [from_spread(f"{base.label()} debiased spread", sweep.report.estimates[base.summary.group])]
        return f"{base.spread_text()} | {texts(quantities)}", quantities, [], Check.of([base])

    return per_stratum(
        sweep,
        evaluate,
        low_rate_needs(sweep, "a plain low-rate SGD group over two or more sigmas"),
    )


def sgd_remembers_more_than_adaptive(sweep: Sweep) -> Finding:
    def evaluate(groups: list[Group]) -> Evaluated | None:
        base, adaptive = baseline_sgd(sweep, groups), _adaptive(groups)
        if base is None or not adaptive:
            return None
        quantities = [difference(f"{base.label()} − {g.label()}", base.accuracy, g.accuracy) for g in adaptive]
        momentum = _momentum(groups)
        notes = [difference(f"momentum: {base.label()} − {g.label()}", base.accuracy, g.accuracy) for g in momentum]
        shown = "; ".join(g.spread_text() for g in [base, *adaptive, *momentum])
        return f"{shown} | debiased {texts(quantities + notes)}", quantities, notes, _adaptive_check(base, adaptive)

    return per_stratum(
        sweep,
        evaluate,
        adaptive_needs(sweep),
    )


def _forgets(base: Group, other: Group, what: str) -> Quantity:
    """``FORGOTTEN_SHARE`` × the baseline's debiased spread − the other's: above zero when the other forgets."""
    return difference(
        f"{FORGOTTEN_SHARE:g} × {base.label()} − {what}", scaled(base.accuracy, FORGOTTEN_SHARE), other.accuracy
    )


def adaptive_optimizers_forget(sweep: Sweep) -> Finding:
    def evaluate(groups: list[Group]) -> Evaluated | None:
        base, adaptive = baseline_sgd(sweep, groups), _adaptive(groups)
        if base is None or not adaptive:
            return None
        quantities = [_forgets(base, g, g.label()) for g in adaptive]
        momentum = _momentum(groups)
        notes = [_forgets(base, g, f"momentum: {g.label()}") for g in momentum]
        shown = "; ".join(g.spread_text() for g in [base, *adaptive, *momentum])
        measured = f"{shown} | {texts(quantities, verdicts=len(quantities) > 1)}"
        measured += f" | notes: {texts(notes)}" if notes else ""
        return measured, quantities, notes, _adaptive_check(base, adaptive)

    return per_stratum(
        sweep,
        evaluate,
        adaptive_needs(sweep),
    )


# -- explicit L2 ------------------------------------------------------------------------------

L2_NEEDS = "a plain low-rate SGD group and the same with L2 (--l2 or --weight-decay above 0), nothing else different"


def l2_needs(sweep: Sweep) -> str:
    return low_rate_needs(sweep, L2_NEEDS)


def _with_l2(groups: list[Group]) -> list[Group]:
    return sorted(
        (g for g in groups if g.family == SGD_FAMILY and g.config.momentum == 0 and g.shrink > 0),
        key=lambda g: g.shrink,
    )


def l2_shrinks_sgd_spread(sweep: Sweep) -> Finding:
    """Plain SGD's debiased spread above that of the same with its strongest L2 coefficient. The
    weaker coefficients are notes (a dose-response), not part of the verdict: a coefficient whose
    T_L2 stays far below 1 within the horizon (1e-4 for 100 CIFAR epochs: T_L2 = 0.035) cannot
    have forgotten much, and requiring it to would set the claim up to fail."""

    def evaluate(groups: list[Group]) -> Evaluated | None:
        base, l2 = baseline_sgd(sweep, groups), _with_l2(groups)
        if base is None or not l2:
            return None
        strongest = l2[-1]
        quantities = [difference(f"{base.label()} − {strongest.label()}", base.accuracy, strongest.accuracy)]
        notes = [difference(f"dose-response: {base.label()} − {g.label()}", base.accuracy, g.accuracy) for g in l2[:-1]]
        shown = "; ".join(g.spread_text() for g in [base, *l2])
        check = Check.of([base, strongest], [(strongest, CLOCK_L2)])
        return f"{shown} | debiased {texts(quantities + notes)}", quantities, notes, check

    return per_stratum(
        sweep,
        evaluate,
        l2_needs(sweep),
    )


def l2_brings_spread_near_zero(sweep: Sweep) -> Finding:
    """The strongest L2 coefficient's debiased spread below ``FORGOTTEN_SHARE`` of plain SGD's; the
    weaker coefficients as a dose-response (notes: each one's difference from plain SGD)."""

    def evaluate(groups: list[Group]) -> Evaluated | None:
        base, l2 = baseline_sgd(sweep, groups), _with_l2(groups)
        if base is None or not l2:
            return None
        strongest = l2[-1]
        quantities = [_forgets(base, strongest, strongest.label())]
        notes = [
            _forgets(base, g, f"dose-response: {g.label()}") for g in l2[:-1]
        ]  # each weaker coefficient against the same margin
        shown = "; ".join(g.spread_text() for g in [base, *l2])
        check = Check.of([base, strongest], [(strongest, CLOCK_L2)])
        return f"{shown} | {texts(quantities + notes)}", quantities, notes, check

    return per_stratum(
        sweep,
        evaluate,
        l2_needs(sweep),
    )


# -- batch size -------------------------------------------------------------------------------


def batch_pairs(sweep: Sweep, groups: list[Group]) -> list[tuple[Group, Group, str]]:
    """Every (smaller, larger batch, how they are matched) pair of low-rate SGD groups in a stratum
    that each trained to convergence ("each to convergence": both stop by ``--patience``, so neither
    count is imposed), or trained the same epochs ("equal epochs": the larger batch took fewer steps)
    or the same number of steps ("equal steps", T_adapt within ``EQUAL_STEPS``: the larger batch
    trained proportionally longer, so its smaller T_SGD is its batch's, not a shorter run's)."""
    low = sorted((g for g in groups if low_rate(sweep, g)), key=lambda g: (g.config.batch_size, g.summary.clock_adapt))
    pairs = []
    for i, small in enumerate(low):
        for large in low[i + 1 :]:
            if large.config.batch_size == small.config.batch_size or large.config.lr != small.config.lr:
                continue
            if large.config.patience and small.config.patience:
                pairs.append((small, large, "each to convergence"))
            elif large.compared.epochs == small.compared.epochs:
                pairs.append((small, large, "equal epochs"))
            elif math.isclose(large.summary.clock_adapt, small.summary.clock_adapt, rel_tol=EQUAL_STEPS):
                pairs.append((small, large, "equal steps"))
    return pairs


def larger_batch_increases_spread(sweep: Sweep) -> Finding:
    """Low-rate SGD groups that differ only in batch size (and the epochs that equalise their steps):
    each larger batch against each smaller one, at equal epochs and at equal steps, each read labelled.
    At equal epochs a larger batch also takes fewer steps (the contrast of a shorter run); at equal
    steps only its batch differs, which is what the paper's minibatch-noise reading is about."""

    def evaluate(groups: list[Group]) -> Evaluated | None:
        pairs = batch_pairs(sweep, groups)
        if not pairs:
            return None
        quantities = [
            difference(f"{large.label()} − {small.label()} ({matched})", large.accuracy, small.accuracy)
            for small, large, matched in pairs
        ]
        compared = list({id(g): g for pair in pairs for g in pair[:2]}.values())
        shown = "; ".join(g.spread_text() for g in compared)
        # the smaller batch is the one whose noise should have made it forget: its T_SGD must have run
        check = Check.of(compared, [(small, CLOCK_SGD) for small, _, _ in pairs])
        return f"{shown} | debiased {texts(quantities)}", quantities, [], check

    return per_stratum(
        sweep,
        evaluate,
        low_rate_needs(
            sweep,
            "two plain low-rate SGD groups at one rate that differ only in batch size, at equal epochs or at equal "
            "steps (the larger batch trained proportionally more epochs)",
        ),
    )


# -- norms ------------------------------------------------------------------------------------


def norm_forgetting(group: Group) -> dict[int, float]:
    """Per seed, how far the final norm ratio across sigma moved from the initial one, in log
    scale: 0 = ||W|| at sigma_max / at sigma_min stayed what it was at initialization (radial
    memory), 1 = the final norms meet (a common scale), below 0 = they moved further apart."""
    by_seed: dict[int, dict[float, CellRecord]] = {}
    for cell in group.cells:
        if cell.trained and {WEIGHT_NORM, WEIGHT_NORM_RATIO} <= set(cell.metrics):
            by_seed.setdefault(cell.config.seed, {})[cell.config.sigma] = cell
    sigmas = sorted({c.config.sigma for c in group.cells})
    moved = {}
    for seed, cells in by_seed.items():
        low, high = cells.get(sigmas[0]), cells.get(sigmas[-1])
        if low is None or high is None or low is high:
            continue
        final = high.metrics[WEIGHT_NORM] / low.metrics[WEIGHT_NORM]
        initial = (high.metrics[WEIGHT_NORM] / high.metrics[WEIGHT_NORM_RATIO]) / (
            low.metrics[WEIGHT_NORM] / low.metrics[WEIGHT_NORM_RATIO]
        )
        if initial > 0 and final > 0 and abs(math.log(initial)) > 1e-12:
            moved[seed] = 1 - math.log(final) / math.log(initial)
    return moved


def norms_coupled_for_sgd_not_adaptive(sweep: Sweep) -> Finding:
    """One line per optimizer: SGD's share of the initial log norm ratio forgotten below
    ``COUPLED_AT_MOST``; each adaptive optimizer's above ``CONVERGED_AT_LEAST``."""

    def evaluate(groups: list[Group]) -> Evaluated | None:
        base, adaptive = baseline_sgd(sweep, groups), _adaptive(groups)
        if base is None or not adaptive:
            return None
        sgd = list(norm_forgetting(base).values())
        quantities = [negated(from_seeds("", sgd, "", COUPLED_AT_MOST), f"{COUPLED_AT_MOST:g} − {base.label()}")]
        for group in adaptive:
            shares = list(norm_forgetting(group).values())
            quantities.append(from_seeds(f"{group.label()} − {CONVERGED_AT_LEAST:g}", shares, "", CONVERGED_AT_LEAST))
        momentum = _momentum(groups)
        notes = [from_seeds(f"momentum: {g.label()}", list(norm_forgetting(g).values())) for g in momentum]
        shown = "; ".join(
            f"{g.label()} {statistics.fmean(m.values()):.2f}" if (m := norm_forgetting(g)) else f"{g.label()} –"
            for g in [base, *adaptive, *momentum]
        )
        measured = (
            "share of the initial log norm ratio (sigma_max/sigma_min) forgotten by the end, 0 = coupled, "
            f"1 = converged: {shown} | {texts(quantities, verdicts=True)}"
        )
        return measured, quantities, notes, _adaptive_check(base, adaptive, converged=False)

    return per_stratum(
        sweep,
        evaluate,
        adaptive_needs(sweep),
    )


# -- the clocks -------------------------------------------------------------------------------


def clock_families(sweep: Sweep) -> dict[tuple, list[Group]]:
    """Groups that share a mechanism and every setting but ``FAMILY_FREE``, families of two or
    more only, keyed by (mechanism clock, the settings they share)."""
    fields = [f for f in group_fields(g.config for g in sweep.groups) if f not in FAMILY_FREE]
    families: dict[tuple, list[Group]] = {}
    for group in sweep.groups:
        if group.family == UNKNOWN_FAMILY:  # no clock declared: no mechanism to order it by
            continue
        key = (mechanism_clock(group.config, group.family), tuple((f, getattr(group.config, f)) for f in fields))
        families.setdefault(key, []).append(group)
    return {key: groups for key, groups in families.items() if len(groups) >= 2}


def familyless(sweep: Sweep) -> str:
    """The one line that names the groups no family claim reads ("" when none)."""
    names = sorted({g.label() for g in sweep.groups if g.family == UNKNOWN_FAMILY})
    return f"; left out: {', '.join(names)} (its optimizer's plugin declares no clock, so no family)" if names else ""


def rank_correlation(sweep: Sweep, groups: list[Group], clock: str, label: str) -> Quantity:
    """Spearman's rho of each group's ``clock`` and its debiased spread, claimed *below* zero (as a
    quantity above zero: −rho), its interval from each group's spread drawn from its t distribution."""
    import numpy as np

    clocks = np.array([getattr(g.summary, clock) for g in groups], dtype=float)
    observed = float(spearman_rhos(clocks, np.array([[g.summary.debiased_spread] for g in groups]))[0])
    estimates = [sweep.report.estimates[g.summary.group] for g in groups]
    if any(not e.decided for e in estimates):
        return Quantity(label, -observed, math.nan, math.nan, "", SEEDS_ONLY, "a group has too few seeds", True)
    rng = np.random.default_rng(CLOCK_DRAWS_SEED)
    draws = np.stack(
        [e.estimate + e.se * rng.standard_t(e.df if math.isfinite(e.df) else 1e9, CLOCK_DRAWS) for e in estimates]
    )
    rhos = spearman_rhos(clocks, draws).tolist()

    def at(level: float) -> tuple[float, float]:
        low, high = percentile_interval(rhos, level)
        return -high, -low

    low, high = at(LEVEL)
    scope = {e.interval_for for e in estimates}
    return Quantity(label, -observed, low, high, "", scope.pop() if len(scope) == 1 else SEEDS_ONLY, "", False, at)


def spearman_rhos(clocks: Any, spreads: Any) -> Any:
    """Spearman's rho (average ranks for ties) of ``clocks`` (one per group) with each column of
    ``spreads`` (groups x draws), computed as ``scipy.stats.spearmanr`` computes it, for all the
    draws at once (one call per draw cost the report seconds); nan where either side is constant
    or a spread is nan."""
    import numpy as np
    from scipy import stats

    n = len(clocks)
    columns = np.asarray(spreads, dtype=float).reshape(n, -1)
    x = stats.rankdata(clocks)
    y = stats.rankdata(columns, axis=0)
    x, y = x - x.mean(), y - y.mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        # np.corrcoef's steps: the covariance over each standard deviation in turn, clipped to [-1, 1]
        rho = np.clip((x @ y / (n - 1)) / np.sqrt((y * y).sum(axis=0) / (n - 1)) / np.sqrt(x @ x / (n - 1)), -1, 1)
    rounded = np.round(columns, 12)
    constant = (rounded == rounded[0]).all(axis=0) | (len(set(clocks.tolist())) < 2)
    return np.where(constant | np.isnan(columns).any(axis=0), math.nan, rho)


def spread_orders_by_clock_within_family(sweep: Sweep) -> Finding:
    """Within each family of three or more groups that forget by one mechanism and differ only in
    what its clock accounts for (learning rate, batch size, momentum, lambda, horizon), the group
    with the larger clock has the smaller debiased spread: Spearman's rho below zero in every family.
    Comparing across families would restate the optimizer claims (T_adapt = Σ η is far above
    T_SGD = Σ η²/b whenever η ≪ b: docs/STATISTICS.md); within one it is not given by the definitions."""
    every = clock_families(sweep)
    families = {key: groups for key, groups in every.items() if len(groups) >= 3}
    if not families:
        return sweep.claim.finding(
            "groups missing from the sweep" + familyless(sweep),
            NOT_EVALUATED,
            needs="three groups of one family (say plain SGD at three batch sizes or rates) that differ only in "
            "what its clock accounts for",
        )
    short = {g.summary.group: g.summary.label for g in sweep.groups}  # the report's one label per group
    quantities = []
    check = Check.of([])
    for (clock, _), groups in families.items():
        names = ", ".join(short[g.summary.group] for g in groups)
        quantities.append(rank_correlation(sweep, groups, clock, f"−rho({CLOCK_SYMBOLS[clock]}, spread) [{names}]"))
        # the family's forgetting has something to order only once its largest clock has run
        largest = max(groups, key=lambda g: getattr(g.summary, clock))
        check = Check.of([*check.compared, *groups], [*check.clocked, (largest, clock)])
    left_out = [
        f"{CLOCK_SYMBOLS[clock]} family [{', '.join(short[g.summary.group] for g in groups)}]: left out (two groups)"
        for (clock, _), groups in every.items()
        if len(groups) < 3
    ]
    measured = (
        f"Spearman's rho (ties averaged) of clock and debiased spread within each family, negated: {texts(quantities)}"
        + "".join(f"; {text}" for text in left_out)
        + familyless(sweep)
    )
    verdict, regime = sweep.verdict(quantities, check)
    return sweep.claim.finding(measured, verdict, quantities, regime=regime)


def clock_agreement(
    groups: list[Group], clock: str, forgetting: dict[str, Any], against: str = "epoch"
) -> tuple[dict[int, float], list[str]]:
    """Per seed with a radial half-life in every group of the family: the sd over groups of its
    log half-life in ``clock`` minus that in ``against`` (epochs, or another clock). Also the groups
    with no half-life to offer."""
    per_group, missing = [], []
    for group in groups:
        found = forgetting.get(group.summary.group)
        seeds = found.seed_half_lives.get("radial", {}) if found else {}
        usable = {
            seed: units
            for seed, units in seeds.items()
            if units[against] > 0 and units[clock] > 0 and not math.isnan(units[clock] + units[against])
        }
        if not usable:
            missing.append(group.summary.group)
        per_group.append(usable)
    shared = sorted(set.intersection(*(set(g) for g in per_group))) if per_group else []
    return {
        seed: statistics.stdev([math.log(g[seed][clock]) for g in per_group])
        - statistics.stdev([math.log(g[seed][against]) for g in per_group])
        for seed in shared
    }, missing


def forgetting_follows_the_clocks(sweep: Sweep) -> Finding:
    """Per seed, the sd over a family's groups of the log radial half-life in the mechanism's clock
    minus that in epochs (log units make the two comparable), with a t interval over seeds; claimed
    below zero in every family whose radial memory halves within the horizon (in every group, for at
    least ``MIN_SEEDS`` seeds). A family whose memory never halves says nothing either way and is
    named as left out; with none left the claim is not resolved."""
    claim = sweep.claim
    families = clock_families(sweep)
    needs = "two groups of one family that differ in lr, batch size or lambda, with per-epoch histories"
    if not families:
        return claim.finding("groups missing from the sweep" + familyless(sweep), NOT_EVALUATED, needs=needs)
    if not sweep.report.forgetting:
        return claim.finding("no per-epoch histories in these records", NOT_EVALUATED, needs=needs)
    short = {g.summary.group: g.summary.label for g in sweep.groups}  # the report's one label per group
    parts, quantities, notes, too_few, check = [], [], [], False, Check.of([])
    regime: list[str] = []
    for (clock, _), groups in families.items():
        differences, missing = clock_agreement(groups, clock, sweep.report.forgetting)
        trained_seeds = set.intersection(*({c.config.seed for c in g.cells if c.trained} for g in groups))
        too_few = too_few or len(trained_seeds) < MIN_SEEDS
        family = f"{CLOCK_SYMBOLS[clock]} family [{', '.join(short[g.summary.group] for g in groups)}]"
        values = list(differences.values())
        if len(values) < MIN_SEEDS:
            why = (
                f"no radial half-life within the horizon in {', '.join(short[m] for m in missing)}"
                if missing
                else f"half-lives in every group for {len(values)} seed(s)"
            )
            parts.append(f"{family}: left out ({why})")
            continue
        found = negated(
            from_seeds("", values, "log"), f"−(sd of log half-life in {CLOCK_SYMBOLS[clock]} − in epochs) {family}"
        )
        quantities.append(found)
        check = Check.of([*check.compared, *groups], converged=False)  # half-lives over training: no spread read
        # The mechanism's clock against the other clocks too (notes): the right clock should line the
        # half-lives up better than a wrong one, not only better than the epoch count.
        for other in (c for c in CLOCK_SYMBOLS if c != clock):
            against = list(clock_agreement(groups, clock, sweep.report.forgetting, other)[0].values())
            if len(against) >= 2:
                label = f"−(sd in {CLOCK_SYMBOLS[clock]} − in {CLOCK_SYMBOLS[other]}) {family}"
                notes.append(negated(from_seeds("", against, "log"), label))
        parts.append(f"{quantity_text(found, '+.3f')} over {len(values)} seeds")
    if too_few:
        verdict = CANNOT_DECIDE
    elif quantities:
        verdict, regime = sweep.verdict(quantities, check)
    else:
        verdict = NOT_RESOLVED
    if notes:
        parts.append(f"against the other clocks (notes): {texts(notes)}")
    measured = "; ".join(parts) + familyless(sweep)
    return claim.finding(measured, verdict, quantities, needs=needs, notes=notes, regime=regime)


# -- horizon and rate -------------------------------------------------------------------------


def family_ends(
    groups: list[Group], free: tuple[str, ...], key: Callable[[Group], float], ratio: float
) -> list[tuple[Group, Group]]:
    """Within each family of ``groups`` that differ only in ``free``: its (smallest, largest)
    by ``key``, where the largest is at least ``ratio`` times the smallest."""
    families: dict[tuple, list[Group]] = {}
    for group in groups:
        families.setdefault(settings(group.compared, free), []).append(group)
    ends = []
    for members in families.values():
        low, high = min(members, key=key), max(members, key=key)
        if low is not high and key(low) > 0 and key(high) >= ratio * key(low) * (1 - 1e-9):
            ends.append((low, high))
    return ends


def longer_training_keeps_sgd_memory(sweep: Sweep) -> Finding:
    """Plain-SGD groups that differ only in horizon (epochs or ``until``), the longest at least
    ``LONGER`` times the shortest (in T_SGD): "training longer does not help" as the paper says it,
    the long group's debiased spread above zero and at least ``KEPT_AT_LEAST`` of the short one's
    (long − 0.75 × short > 0, a non-inferiority on the scaled table, records kept). Notes: the
    earlier 50% margin and the plain difference short − long."""
    pairs = family_ends(
        [g for g in sweep.groups if plain_sgd(g)], ("epochs", "until"), lambda g: g.summary.clock_sgd, LONGER
    )
    pairs = [(short, long) for short, long in pairs if low_rate(sweep, short)]
    if not pairs:
        return sweep.claim.finding(
            "groups missing from the sweep",
            NOT_EVALUATED,
            needs=low_rate_needs(
                sweep,
                f"two plain SGD groups that differ only in horizon, one {LONGER:g}x the other, the shorter low-rate",
            ),
        )
    parts, quantities, notes = [], [], []
    check = Check.of([group for pair in pairs for group in pair])  # a claim that memory is kept: no clock to wait for
    for short, long in pairs:
        mine = [
            from_spread(f"long {long.label()}", sweep.report.estimates[long.summary.group]),
            difference(f"long − {KEPT_AT_LEAST:g} × short", long.accuracy, scaled(short.accuracy, KEPT_AT_LEAST)),
        ]
        extra = [
            difference(f"long − {KEPT_HALF:g} × short", long.accuracy, scaled(short.accuracy, KEPT_HALF)),
            difference("short − long", short.accuracy, long.accuracy),
        ]
        quantities += mine
        notes += extra
        horizon = f"T_SGD {short.summary.clock_sgd:.3g} → {long.summary.clock_sgd:.3g}"
        parts.append(
            f"{short.label()} lr={short.config.lr:g}, {horizon} "
            f"({long.summary.clock_sgd / short.summary.clock_sgd:.3g}x): "
            f"short {short.spread_text().split(' ', 2)[-1]}; long {long.spread_text().split(' ', 2)[-1]}"
            f" | {texts(mine)} | notes: {texts(extra)}"
        )
    verdict, regime = sweep.verdict(quantities, check)
    return sweep.claim.finding("; ".join(parts), verdict, quantities, notes=notes, regime=regime)


def larger_lr_makes_sgd_forget(sweep: Sweep) -> Finding:
    """Plain-SGD groups that differ only in learning rate (same batch, same horizon settings), the
    largest at least ``LARGER_LR`` times the smallest: the small rate's debiased spread is above the
    large rate's."""
    pairs = family_ends([g for g in sweep.groups if plain_sgd(g)], ("lr",), lambda g: g.config.lr, LARGER_LR)
    pairs = [(low, high) for low, high in pairs if low_rate(sweep, low)]  # the smaller rate: the baseline
    if not pairs:
        return sweep.claim.finding(
            "groups missing from the sweep",
            NOT_EVALUATED,
            needs=low_rate_needs(
                sweep,
                f"two plain SGD groups that differ only in learning rate, one {LARGER_LR:g}x the other, the smaller "
                "low-rate",
            ),
        )
    parts, quantities = [], []
    # the larger rate is the one whose noise should have made SGD forget: its T_SGD must have run
    check = Check.of([group for pair in pairs for group in pair], [(high, CLOCK_SGD) for _, high in pairs])
    for low, high in pairs:
        found = difference(f"debiased lr={low.config.lr:g} − lr={high.config.lr:g}", low.accuracy, high.accuracy)
        quantities.append(found)
        parts.append(
            f"{low.label()} lr={low.config.lr:g} (T_SGD {low.summary.clock_sgd:.3g}) "
            f"{low.spread_text().split(' ', 2)[-1]}; lr={high.config.lr:g} "
            f"(T_SGD {high.summary.clock_sgd:.3g}) {high.spread_text().split(' ', 2)[-1]} | {quantity_text(found)}"
        )
    verdict, regime = sweep.verdict(quantities, check)
    return sweep.claim.finding("; ".join(parts), verdict, quantities, regime=regime)


# -- depth ------------------------------------------------------------------------------------


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


def share_difference(label: str, k1: int, n1: int, k2: int, n2: int) -> Quantity:
    """The difference of two shares of runs, k1/n1 − k2/n2, with Newcombe's interval (``rate_difference``)."""
    low, high = rate_difference(k1, n1, k2, n2)
    return Quantity(
        label,
        k1 / n1 - k2 / n2 if min(n1, n2) else math.nan,
        low,
        high,
        "",
        SEEDS_ONLY,
        "" if min(n1, n2) else "no runs",
        min(n1, n2) < MIN_SEEDS,
        lambda level: rate_difference(k1, n1, k2, n2, level),
    )


def interpolation_counts(cells: list[CellRecord], sigma: float) -> tuple[int, int]:
    """(runs that reached the interpolation threshold, runs that ran to the end or diverged) at ``sigma``:
    a diverged run did not interpolate; a cell that failed for another reason is left out."""
    ran = [c for c in cells if c.config.sigma == sigma and c.status == FINISHED]
    return sum(1 for c in ran if c.trained and TAU_INTERP in c.metrics), len(ran)


def deep_nets_fail_to_interpolate(sweep: Sweep) -> Finding:
    """Plain-SGD groups (the paper's bad forgetting is low-rate SGD's) that differ only in
    architecture, among the CIFAR ResNets: for each deeper net, (a) at the largest sigma the
    shallowest net interpolates in a larger share of its runs, and (b) the deeper net itself
    interpolates in a larger share at the smallest sigma than at the largest (the failure is one of
    large sigma). Each share difference has Newcombe's interval (``rate_difference``). Reads every
    cell, trained or not (a group that never trained still counts its runs)."""
    claim = sweep.claim
    needs = "plain SGD on two CIFAR ResNet depths (resnet20 and resnet56, say), nothing else different"
    families: dict[tuple, list[list[CellRecord]]] = {}
    for cells in sweep.cells.values():
        config = cells[0].config
        if CIFAR_DEPTH.match(config.arch) and is_plain_sgd(config, optimizer_family(cells[0])):
            families.setdefault(settings(config, ("arch",)), []).append(cells)

    def depth(cells: list[CellRecord]) -> int:
        match = CIFAR_DEPTH.match(cells[0].config.arch)
        assert match is not None  # families hold only architectures CIFAR_DEPTH matches
        return int(match.group(1))

    families = {k: sorted(v, key=depth) for k, v in families.items() if len({depth(c) for c in v}) >= 2}
    if not families:
        return claim.finding("groups missing from the sweep", NOT_EVALUATED, needs=needs)
    quantities, shown = [], []
    for members in families.values():
        sigmas = sorted(set.intersection(*({c.config.sigma for c in cells} for cells in members)))
        if len(sigmas) < 2:
            continue
        low, high = sigmas[0], sigmas[-1]
        shallow = members[0]
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
            deep_name, base = deep[0].config.arch, shallow[0].config.arch
            quantities.append(
                share_difference(
                    f"{base} − {deep_name} at sigma {high:g}",
                    *interpolation_counts(shallow, high),
                    *interpolation_counts(deep, high),
                )
            )
            quantities.append(
                share_difference(
                    f"{deep_name} at sigma {low:g} − at {high:g}",
                    *interpolation_counts(deep, low),
                    *interpolation_counts(deep, high),
                )
            )
    if not quantities:
        return claim.finding("groups missing from the sweep (no two sigmas shared)", NOT_EVALUATED, needs=needs)
    measured = (
        "runs that interpolated: " + " | ".join(shown) + " | share differences: " + texts(quantities).replace(" :", ":")
    )
    return claim.finding(measured, verdict_of(quantities), quantities)


# -- the effective step (a control the paper does not run) -------------------------------------


def effective_step_explains_memory(sweep: Sweep) -> Finding:
    """Plain low-rate SGD against the same with the scale-invariant kernels' rate matched to sigma
    (``--lr-match-sigma``): the matched group's debiased spread below ``FORGOTTEN_SHARE`` of the plain
    one's. Reproduced: the memory of sigma is, within the margin, the memory of a different effective
    step; contradicted: the matched group keeps more than a quarter, so something beyond the
    effective step is remembered."""

    def evaluate(groups: list[Group]) -> Evaluated | None:
        base = baseline_sgd(sweep, [g for g in groups if g.config.lr_match_sigma == 0])
        matched = [g for g in groups if plain_sgd(g) and g.config.lr_match_sigma > 0]
        if base is None or not matched:
            return None
        quantities = [_forgets(base, g, f"{g.label()} to sigma {g.config.lr_match_sigma:g}") for g in matched]
        shown = "; ".join(g.spread_text() for g in [base, *matched])
        return f"{shown} | {texts(quantities)}", quantities, [], Check.of([base, *matched])

    return per_stratum(
        sweep,
        evaluate,
        low_rate_needs(sweep, "plain low-rate SGD with and without --lr-match-sigma, nothing else different"),
    )
