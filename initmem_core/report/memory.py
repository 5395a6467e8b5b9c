"""The initialization-memory report: per group, how much the selected predictor depends on sigma.

Pure: ``build_report(records)`` reads nothing and writes nothing, so it can be checked against a
hand computation; ``report/render.py`` writes it out. Accuracies arrive as fractions and leave in
percent; spreads are in percentage points. A group is every cell that differs only in sigma and
seed (``groups.group_fields``); cells that failed or diverged are failures to train, left out of
every mean. Per group: the paper's ``spread`` (max − min over sigma of the mean, biased upward by
noise) with a percentile interval, and the ``debiased_spread`` (``report/inference.py``,
docs/STATISTICS.md) by which groups are compared; a group within ``CHANCE_MARGIN_PP`` of chance
*did not train* and gets no spread.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from initmem_core.groups import group_fields, group_keys, metric_suffix, short_labels
from initmem_core.report.forgetting import build_forgetting, half_life_metrics
from initmem_core.report.inference import (
    MIN_SEEDS_PER_SIGMA,
    NAN,
    THIS_TEST_SET,
    AccuracyTable,
    Matrix,
    SpreadEstimate,
    cross_fit_spread,
    mean_interval,
    spread_difference,
)
from initmem_core.report.regime import edge_counts
from initmem_core.tracking.records import CellRecord, fit_counts
from initmem_core.vocabulary import (
    BEST_VAL_TEST_ACC,
    CLOCK_ADAPT,
    CLOCK_L2,
    CLOCK_SGD,
    CLOCKS,
    REPAIR_GAP,
    STOP_EPOCH,
    TAU_INTERP,
    TEST_EXAMPLES,
    WEIGHT_NORM,
    WEIGHT_NORM_RATIO,
)

if TYPE_CHECKING:
    from initmem_core.report.verdicts import Finding

#: Bootstrap replicates, and the fixed seed that makes a report reproducible.
REPLICATES, BOOTSTRAP_SEED = 1000, 0
#: A group whose best mean accuracy is below chance + this many points did not train.
CHANCE_MARGIN_PP = 5.0


@dataclass
class SigmaRow:
    group: str
    sigma: float
    runs: int
    failed: int
    test_acc: float  # % mean over seeds, at the best-validation checkpoint
    test_acc_std: float  # pp, sample std over seeds (nan with one seed)
    test_acc_lo: float  # 95% t interval of the mean over seeds (nan with one seed)
    test_acc_hi: float
    tau_interp: float  # mean epoch over the seeds that interpolated
    never_interp: int  # trained seeds that never reached the threshold
    fit: int  # runs whose selected predictor fit its training set (CellRecord.fit), of those that ran
    repair_gap: float  # pp
    weight_norm: float
    weight_norm_ratio: float
    clock_sgd: float
    clock_l2: float
    clock_adapt: float
    untrained: str = ""  # why this sigma's runs did not train: "at chance", "not fit" (others did); "" trained
    stopped: str = ""  # how its trained runs ended, e.g. "patience 5, epochs 1 (epochs 14–30)"; "": not logged
    at_edge: str = ""  # trained runs selected at the horizon's edge, of those that tell ("6/6"; regime.at_edge)


@dataclass
class GroupSummary:
    group: str
    spread: float  # pp: max - min over sigma of the mean test accuracy (nan: did not train)
    spread_lo: float  # 95% percentile interval, resampling each sigma's trained runs
    spread_hi: float
    best_sigma: float
    worst_sigma: float
    sigmas: int
    never_interp_sigmas: int  # sigmas at which no trained seed interpolated
    failed: int
    runs_fit: int  # runs whose selected predictor fit its training set (report/regime.py)
    runs_ran: int  # runs that ran to the end or diverged (a run that diverged did not fit)
    clock_sgd: float
    clock_l2: float
    clock_adapt: float
    did_not_train: bool = False  # best accuracy within CHANCE_MARGIN_PP of chance
    untrained_sigmas: tuple[float, ...] = ()  # sigmas whose runs did not train (SigmaRow.untrained)
    best_acc: float = NAN  # % the best mean over sigma
    chance_acc: float = NAN  # % the dataset's chance level, 100 / classes (nan: classes unknown)
    #: pp: the cross-fitted spread, not biased up by noise (0 for a group that remembers nothing)
    debiased_spread: float = NAN
    debiased_spread_lo: float = NAN  # its 95% t interval (nan: too few seeds, see debiased_note)
    debiased_spread_hi: float = NAN
    #: why the debiased spread has no interval, and the sigmas left out for too few trained runs
    debiased_note: str = ""
    #: what its interval is for: "population" (the test set's sampling error included, from the
    #: runs' per-example records) or "this test set" (records missing: see debiased_note)
    debiased_interval_for: str = THIS_TEST_SET
    #: what every place that shows the group names it by (``groups.short_labels``): the settings
    #: that tell the sweep's groups apart, e.g. ``adamw,lr=0.001``; ``group`` is the full key
    label: str = ""


@dataclass
class PairedDifference:
    """Group ``a`` minus group ``b``: cross-fitted spreads over the sigmas both measured (t
    interval, ``report/inference.py``) and accuracy over cells of equal sigma and seed (t interval
    over those pairs)."""

    a: str
    b: str
    spread_diff: float
    spread_diff_lo: float
    spread_diff_hi: float
    acc_diff: float
    acc_diff_lo: float
    acc_diff_hi: float
    pairs: int
    shared_sigmas: int = 0  # the sigmas the spreads were compared over
    note: str = ""  # why the spread difference has no interval
    #: what the spread difference's interval is for: "population" or "this test set" (and why)
    interval_for: str = THIS_TEST_SET
    scope_note: str = ""
    #: unresolved: the seeds per sigma at which a new sweep would resolve it with 80% power if the
    #: true difference were the observed one (None: resolved, or no count up to 200 would; see the note)
    seeds_needed: int | None = None
    seeds_needed_note: str = ""


@dataclass
class Failure:
    group: str
    sigma: float
    seed: int
    status: str
    error: str
    run_id: str


@dataclass
class Report:
    groups: list[GroupSummary]
    rows: list[SigmaRow]
    failures: list[Failure]
    group_fields: list[str]
    #: group -> [(sigma, seed, [(epoch, ||W||_F)])] of every trained cell, for the norm plot
    norm_curves: dict[str, list[tuple[float, int, list[tuple[int, float]]]]] = field(default_factory=dict)
    pairs: list[PairedDifference] = field(default_factory=list)
    #: group -> its cross-fitted spread with what it rests on (report/inference.py)
    estimates: dict[str, SpreadEstimate] = field(default_factory=dict)
    #: group -> accuracy (pp) by sigma and seed of its trained cells
    accuracy: dict[str, Matrix] = field(default_factory=dict)
    #: group -> its memories over training and their half-lives (report/forgetting.py)
    forgetting: dict[str, Any] = field(default_factory=dict)
    #: every registered claim evaluated on these groups, in the claims' registration order (empty: not
    #: evaluated; ``report/assessment.py`` fills it)
    findings: list[Finding] = field(default_factory=list)
    #: the settings every group shares (``groups.short_labels``), e.g. ``opt=sgd, epochs=3``
    shared: str = ""

    def label(self, group: str) -> str:
        """``group``'s (a key) short label; the key itself for a group the report does not hold."""
        return next((g.label for g in self.groups if g.group == group and g.label), group)

    def parent_metrics(self) -> dict[str, float]:
        """Per-group figures as metric names the MLflow UI can chart, e.g. ``spread_opt-sgd``."""
        metrics = {}
        for g in self.groups:
            suffix = metric_suffix(g.group)
            figures = {
                "spread": g.spread,
                "never_interp_sigmas": g.never_interp_sigmas,
                "failed_cells": g.failed,
                "unfit_runs": g.runs_ran - g.runs_fit,
                **{c: getattr(g, c) for c in CLOCKS},
                "spread_lo": g.spread_lo,
                "spread_hi": g.spread_hi,
                "did_not_train": float(g.did_not_train),
                "debiased_spread": g.debiased_spread,
                "debiased_spread_lo": g.debiased_spread_lo,
                "debiased_spread_hi": g.debiased_spread_hi,
            }
            metrics.update(
                {f"{name}_{suffix}": float(value) for name, value in figures.items() if not math.isnan(value)}
            )

        metrics.update(half_life_metrics(self.forgetting))
        return metrics

    def parent_step_metrics(self) -> list[tuple[str, float, int]]:
        """Each group's memories by epoch, ``(name, value, epoch)``, e.g. ``radial_memory_opt-sgd``
        (nan left out): logged with step = epoch, MLflow's own charts draw them as curves."""
        return [
            (f"{memory}_memory_{metric_suffix(group)}", float(p.value), int(p.epoch))
            for group, found in self.forgetting.items()
            for memory, curve in found.curves.items()
            for p in curve
            if not math.isnan(p.value)
        ]


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else NAN


def percentile_interval(samples: Any, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates, ignoring replicates that are nan."""
    import numpy as np

    samples = np.asarray(samples, dtype=float)
    samples = samples[~np.isnan(samples)]
    if samples.size == 0:
        return NAN, NAN
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def test_set_of(cell: CellRecord) -> tuple:
    """Which test examples a cell's selected accuracy and records score: the whole split when the run
    says so (``test_examples``: runs that score the selected checkpoint on it, capped or not) or
    nothing capped it, else the ``--eval-size`` subset drawn by ``data_seed``."""
    whole = TEST_EXAMPLES in cell.metrics or cell.config.eval_size == 0
    return cell.config.data, cell.config.data_seed, "whole split" if whole else cell.config.eval_size


def accuracy_matrix(cells: Iterable[CellRecord]) -> AccuracyTable:
    """Accuracy (pp) by sigma and seed of the trained cells that logged it: what the
    spread is estimated from. A failed cell is simply absent. It carries the cells' per-example
    records (which test examples each got right, where logged) and which test set they score."""
    table: dict[float, dict[int, float]] = {}
    correct: dict[float, dict[int, Any]] = {}
    test_sets = set()
    for cell in cells:
        if cell.trained and BEST_VAL_TEST_ACC in cell.metrics:
            table.setdefault(cell.config.sigma, {})[cell.config.seed] = 100 * cell.metrics[BEST_VAL_TEST_ACC]
            test_sets.add(test_set_of(cell))
            if cell.test_correct is not None:
                correct.setdefault(cell.config.sigma, {})[cell.config.seed] = cell.test_correct
    return AccuracyTable(table, correct, test_sets.pop() if len(test_sets) == 1 else None)


def resampled_spreads(accuracy: Matrix, replicates: int = REPLICATES, seed: int = BOOTSTRAP_SEED) -> Any:
    """The paper's max − min in ``replicates`` draws that resample each sigma's trained runs
    (never leaving a sigma out of a draw): the spread of that statistic, not of the truth."""
    import numpy as np

    rng = np.random.default_rng(seed)
    means = [
        np.asarray(list(runs.values()))[rng.integers(0, len(runs), size=(replicates, len(runs)))].mean(axis=1)
        for runs in accuracy.values()
        if runs
    ]
    if len(means) < 2:
        return np.full(replicates, np.nan)
    stacked = np.stack(means)
    return stacked.max(axis=0) - stacked.min(axis=0)


def debiased_note(estimate: SpreadEstimate) -> str:
    """What a reader needs to know about a cross-fitted spread: sigmas left out, no interval, an
    interval for this test set only."""
    parts = [
        f"sigma {s:g}: {n} trained run{'s' * (n != 1)}, fewer than {MIN_SEEDS_PER_SIGMA}, left out"
        for s, n in estimate.too_few
    ]
    return "; ".join(parts + [text for text in (estimate.reason, estimate.scope_note) if text])


def _paired(a: GroupSummary, b: GroupSummary, accuracy: Mapping[str, Matrix]) -> PairedDifference:
    mine, theirs = accuracy[a.group], accuracy[b.group]
    difference = spread_difference(mine, theirs)
    diffs = [
        value - theirs[sigma][seed]
        for sigma, runs in mine.items()
        for seed, value in runs.items()
        if seed in theirs.get(sigma, {})
    ]
    needed, why = difference.seeds_needed()
    return PairedDifference(
        a.group,
        b.group,
        difference.estimate,
        difference.lo,
        difference.hi,
        _mean(diffs),
        *mean_interval(diffs),
        len(diffs),
        len(difference.sigmas),
        difference.reason,
        difference.interval_for,
        difference.scope_note,
        needed,
        "" if why == "resolved" else why,
    )


def _sigma_row(group: str, sigma: float, cells: list[CellRecord]) -> SigmaRow:
    trained = [c for c in cells if c.trained]
    acc = [100 * c.metrics[BEST_VAL_TEST_ACC] for c in trained if BEST_VAL_TEST_ACC in c.metrics]
    interpolated = [c for c in trained if TAU_INTERP in c.metrics]
    # an accuracy lies in [0, 100]: so does its interval (few seeds far apart reach past either)
    low, high = (min(max(v, 0.0), 100.0) for v in mean_interval(acc))

    def mean_of(key: str, among: list[CellRecord] = trained, scale: float = 1.0) -> float:
        return _mean([scale * c.metrics[key] for c in among if key in c.metrics])

    return SigmaRow(
        group=group,
        sigma=sigma,
        runs=len(cells),
        failed=len(cells) - len(trained),
        test_acc=_mean(acc),
        test_acc_std=statistics.stdev(acc) if len(acc) > 1 else NAN,
        test_acc_lo=low,
        test_acc_hi=high,
        tau_interp=mean_of(TAU_INTERP, interpolated),
        never_interp=len(trained) - len(interpolated),
        fit=fit_counts(cells)[0],
        repair_gap=mean_of(REPAIR_GAP, interpolated, 100.0),
        weight_norm=mean_of(WEIGHT_NORM),
        weight_norm_ratio=mean_of(WEIGHT_NORM_RATIO),
        clock_sgd=mean_of(CLOCK_SGD),
        clock_l2=mean_of(CLOCK_L2),
        clock_adapt=mean_of(CLOCK_ADAPT),
        stopped=_stops(trained),
        at_edge=_edge_text(*edge_counts(cells)),
    )


def _edge_text(edge: int, known: int) -> str:
    return f"{edge}/{known}" if known else ""


def _stops(cells: list[CellRecord]) -> str:
    """Why the runs stopped (``STOP_REASON_TAG``), how many each and their last epochs; "": not logged."""
    reasons = Counter(c.stop_reason for c in cells if c.stop_reason)
    ends = [int(c.metrics[STOP_EPOCH]) for c in cells if c.stop_reason and STOP_EPOCH in c.metrics]
    low, high = min(ends, default=0), max(ends, default=0)
    span = "" if not ends else f" (epoch {low})" if low == high else f" (epochs {low}–{high})"
    return ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items())) + span


def _summary(
    group: str, rows: list[SigmaRow], cells: list[CellRecord], accuracy: Matrix, estimate: SpreadEstimate, label: str
) -> GroupSummary:
    measured = [r for r in rows if not math.isnan(r.test_acc)]
    best = max(measured, key=lambda r: r.test_acc, default=None)
    worst = min(measured, key=lambda r: r.test_acc, default=None)
    trained = [c for c in cells if c.trained]
    classes = max((c.num_classes for c in cells), default=0)
    # Near chance everywhere: the spread would measure noise around a model that never learned.
    stuck = bool(best and classes and best.test_acc < 100 / classes + CHANCE_MARGIN_PP)
    for r in rows:  # a sigma at chance, or whose runs none fit where others' did, did not train
        chance = bool(classes) and r.test_acc < 100 / classes + CHANCE_MARGIN_PP
        unfit = r.runs > r.failed and r.fit == 0 and any(o.fit for o in rows)
        r.untrained = "at chance" if chance else "not fit" if unfit else ""
    spread = best.test_acc - worst.test_acc if best and worst and not stuck else NAN
    low, high = (NAN, NAN) if math.isnan(spread) else percentile_interval(resampled_spreads(accuracy))
    if stuck:
        estimate = SpreadEstimate(NAN, NAN, NAN, NAN, NAN, 0, ())
    return GroupSummary(
        group=group,
        label=label,
        spread=spread,
        spread_lo=low,
        spread_hi=high,
        did_not_train=stuck,
        untrained_sigmas=tuple(r.sigma for r in rows if r.untrained),
        chance_acc=100 / classes if classes else NAN,
        debiased_spread=estimate.estimate,
        debiased_spread_lo=estimate.lo,
        debiased_spread_hi=estimate.hi,
        debiased_note=debiased_note(estimate),
        debiased_interval_for=estimate.interval_for,
        best_acc=best.test_acc if best else NAN,
        best_sigma=best.sigma if best else NAN,
        worst_sigma=worst.sigma if worst else NAN,
        sigmas=len(rows),
        never_interp_sigmas=sum(1 for r in rows if r.runs > r.failed and r.never_interp == r.runs - r.failed),
        failed=sum(r.failed for r in rows),
        runs_fit=fit_counts(cells)[0],
        runs_ran=fit_counts(cells)[1],
        **{clock: _mean([c.metrics[clock] for c in trained if clock in c.metrics]) for clock in CLOCKS},
    )


def cells_by_group(records: list[CellRecord]) -> dict[str, list[CellRecord]]:
    """``records`` by their group's key (``groups.group_keys``), every cell, trained or not."""
    by_group: dict[str, list[CellRecord]] = {}
    for record, key in zip(records, group_keys(r.config for r in records)):
        by_group.setdefault(key, []).append(record)
    return by_group


def build_report(records: Iterable[CellRecord]) -> Report:
    records = list(records)
    fields = group_fields(r.config for r in records)
    by_group = cells_by_group(records)
    groups, rows, curves = [], [], {}
    failures: list[Failure] = []
    accuracy: dict[str, Matrix] = {group: accuracy_matrix(cells) for group, cells in by_group.items()}
    estimates = {group: cross_fit_spread(table) for group, table in accuracy.items()}
    labels, shared = short_labels(sorted(by_group))
    for group in sorted(by_group):
        cells = by_group[group]
        sigmas = sorted({c.config.sigma for c in cells})
        group_rows = [_sigma_row(group, s, [c for c in cells if c.config.sigma == s]) for s in sigmas]
        rows.extend(group_rows)
        groups.append(_summary(group, group_rows, cells, accuracy[group], estimates[group], labels[group]))
        curves[group] = [
            (c.config.sigma, c.config.seed, c.weight_norms)
            for c in sorted(cells, key=lambda c: (c.config.sigma, c.config.seed))
            if c.trained and c.weight_norms
        ]
        failures.extend(
            Failure(group, c.config.sigma, c.config.seed, "DIVERGED" if c.diverged else c.status, c.error, c.run_id)
            for c in cells
            if not c.trained
        )
    trained = [g for g in groups if not math.isnan(g.spread)]
    pairs = [_paired(a, b, accuracy) for i, a in enumerate(trained) for b in trained[i + 1 :]]
    forgetting = build_forgetting(by_group)
    return Report(groups, rows, failures, fields, curves, pairs, estimates, accuracy, forgetting, shared=shared)
