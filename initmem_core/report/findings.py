"""The paper's findings as checks on a sweep's results: each claim, the numbers, reproduced or not.

Groups are recognised by their configuration, not by name: the *baseline SGD* group is plain SGD
(no momentum, no L2) at the sweep's most common batch size; *adaptive* groups are Adam, AdamW and
Muon. A claim whose groups are missing from the sweep is reported as not evaluated, never as
reproduced.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from initmem_core.sweep.grid import group_keys
from initmem_core.tracking.records import CellRecord
from initmem_core.report.memory import GroupSummary, Report, build_report

ADAPTIVE = ("adam", "adamw", "muon")


@dataclass
class Finding:
    claim: str
    measured: str
    reproduced: bool | None  # None: the sweep lacks the groups this claim needs


@dataclass
class _Group:
    summary: GroupSummary
    opt: str
    momentum: float
    l2: float
    batch_size: int
    norm_coupling: float  # final ||W||_F at the largest sigma / at the smallest (1: forgot the scale)
    clock: float  # the clock that drives this group's forgetting (see forgetting_clock)


def forgetting_clock(opt: str, clock_sgd: float, clock_l2: float, clock_adapt: float) -> float:
    """Adaptive methods run on T_adapt; SGD forgets through its noise and its explicit decay, T_SGD + T_L2."""
    return clock_adapt if opt in ADAPTIVE else clock_sgd + clock_l2


def _groups(records: list[CellRecord], report: Report) -> list[_Group]:
    configs = {key: record.config for record, key in zip(records, group_keys(r.config for r in records))}
    groups = []
    for summary in report.groups:
        config = configs[summary.group]
        rows = sorted((r for r in report.rows if r.group == summary.group and r.runs > r.failed),
                      key=lambda r: r.sigma)
        coupling = rows[-1].weight_norm / rows[0].weight_norm if len(rows) > 1 else float("nan")
        groups.append(_Group(summary, config.opt, config.momentum, config.l2, config.batch_size, coupling,
                             forgetting_clock(config.opt, summary.clock_sgd, summary.clock_l2, summary.clock_adapt)))
    return groups


def _spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        result = [0.0] * len(values)
        for rank, index in enumerate(order):
            result[index] = float(rank)
        return result

    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    mean = (n - 1) / 2
    cov = sum((a - mean) * (b - mean) for a, b in zip(rx, ry))
    var = sum((a - mean) ** 2 for a in rx)
    return cov / var if var else float("nan")


def evaluate_findings(records: Iterable[CellRecord]) -> list[Finding]:
    records = list(records)
    groups = _groups(records, build_report(records))
    sgd = [g for g in groups if g.opt == "sgd" and g.momentum == 0 and g.l2 == 0]
    base_batch = Counter(g.batch_size for g in groups).most_common(1)[0][0] if groups else None
    baseline = next((g for g in sgd if g.batch_size == base_batch), None)
    adaptive = [g for g in groups if g.opt in ADAPTIVE and g.batch_size == base_batch and g.l2 == 0]
    l2 = [g for g in groups if g.opt == "sgd" and g.momentum == 0 and g.l2 > 0 and g.batch_size == base_batch]
    findings = []

    def add(claim: str, needed: bool, measured: str, holds: bool) -> None:
        findings.append(Finding(claim, measured if needed else "groups missing from the sweep",
                                holds if needed else None))

    def spread(g: _Group) -> str:
        return f"{g.opt}{'' if g.opt in ADAPTIVE else f' b={g.batch_size}'}{f' l2={g.l2:g}' if g.l2 else ''} {g.summary.spread:.2f} pp"

    ok = baseline is not None and bool(adaptive)
    add("SGD's spread is larger than each adaptive optimizer's", ok,
        ok and "; ".join([spread(baseline), *map(spread, adaptive)]),
        ok and all(baseline.summary.spread > g.summary.spread for g in adaptive))
    ok = baseline is not None and bool(l2)
    add("L2 shrinks SGD's spread", ok, ok and "; ".join([spread(baseline), *map(spread, l2)]),
        ok and all(g.summary.spread < baseline.summary.spread for g in l2))
    by_batch = sorted((g for g in sgd), key=lambda g: g.batch_size)
    ok = len(by_batch) >= 2
    add("A larger batch increases SGD's spread", ok, ok and "; ".join(map(spread, by_batch)),
        ok and by_batch[-1].summary.spread > by_batch[0].summary.spread)
    ok = baseline is not None and bool(adaptive)
    add("SGD's final ||W||_F stays coupled to sigma; adaptive methods' converge", ok,
        ok and "final-norm ratio, largest/smallest sigma: " + "; ".join(
            f"{g.opt} {g.norm_coupling:.2f}" for g in [baseline, *adaptive]),
        ok and all(baseline.norm_coupling > g.norm_coupling for g in adaptive))
    ok = len(groups) >= 3
    rho = _spearman([g.clock for g in groups], [g.summary.spread for g in groups]) if ok else float("nan")
    add("The forgetting clocks order the groups as their spreads (larger clock, smaller spread)", ok,
        ok and f"Spearman rank correlation of clock and spread over {len(groups)} groups: {rho:.2f}",
        ok and rho < 0)
    return findings
