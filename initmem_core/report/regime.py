"""The regime a verdict needs (docs/STATISTICS.md, "The regime a verdict needs"), checked on the
groups a claim compares before its verdict stands: every run's selected predictor must *fit* its
training set (else ``UNDER_TRAINED``), and a group whose forgetting a claim could contradict must
have run its mechanism's clock to ``CLOCK_THRESHOLDS`` without most runs selected at their last
epoch (``EDGE_SHARE``; else ``HORIZON_SHORT``). Both thresholds were fixed before any confirmatory
run (docs/PREREGISTRATION.md holds them too, and a test keeps the two equal).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from initmem_core.tracking.records import CellRecord, fit_counts
from initmem_core.vocabulary import BEST_VAL_EPOCH, CLOCK_ADAPT, CLOCK_L2, CLOCK_SGD, CLOCK_SYMBOLS


class Group(Protocol):
    """What the checks read of a compared group (``claim_groups.Group``, which imports the report)."""

    cells: list[CellRecord]
    summary: Any  # memory.GroupSummary: its clocks

    def label(self) -> str: ...


#: The clock value a mechanism must reach before a claim that it makes a group forget can be
#: contradicted: "well past 1", as 3 (docs/STATISTICS.md gives the paper's own setting against it).
CLOCK_THRESHOLDS = {CLOCK_SGD: 3.0, CLOCK_L2: 3.0, CLOCK_ADAPT: 3.0}
#: A group is at the horizon's edge when more than this share of its trained runs selected their last epoch.
EDGE_SHARE = 0.5


@dataclass(frozen=True)
class Check:
    """What one evaluation of a claim compared: every group whose runs must fit (``compared``), and
    the groups whose mechanism must have acted, each with its clock (``clocked``)."""

    compared: tuple[Group, ...]
    clocked: tuple[tuple[Group, str], ...] = ()

    @classmethod
    def of(cls, compared: Iterable[Group], clocked: Iterable[tuple[Group, str]] = ()) -> Check:
        return cls(tuple({id(g): g for g in compared}.values()), tuple(clocked))


@dataclass
class Regime:
    """Where a comparison stands against the regime: the groups with runs that did not fit (and the
    counts), and the reasons its horizon is short."""

    unfit: list[str] = field(default_factory=list)
    unfit_runs: int = 0
    runs: int = 0
    short: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.unfit

    def under_trained_text(self) -> str:
        return f"{self.unfit_runs} of {self.runs} runs did not fit ({'; '.join(self.unfit)})"

    def short_text(self) -> str:
        return "; ".join(self.short)


def unfit_text(group: Group) -> str:
    """Which sigmas of ``group`` have runs that did not fit, as "sgd b=128: 0/3 at sigma 2.5, 1/3 at 1.4"."""
    parts = []
    for sigma in sorted({c.config.sigma for c in group.cells}):
        fit, total = fit_counts(c for c in group.cells if c.config.sigma == sigma)
        if fit < total:
            parts.append(f"{fit}/{total} fit at sigma {sigma:g}")
    return f"{group.label()}: {', '.join(parts)}"


def at_edge(group: Group) -> tuple[int, int]:
    """(trained runs selected at their last epoch, trained runs) of ``group``."""
    trained = [c for c in group.cells if c.trained and BEST_VAL_EPOCH in c.metrics]
    last = sum(1 for c in trained if c.histories and c.metrics[BEST_VAL_EPOCH] >= last_epoch(c))
    return last, len(trained)


def last_epoch(cell: CellRecord) -> float:
    """The last epoch any of the cell's histories reached (inf: none has a point)."""
    return max((epoch for history in cell.histories.values() for epoch, _ in history), default=math.inf)


def assess(check: Check, thresholds: Mapping[str, float] = CLOCK_THRESHOLDS) -> Regime:
    """Where ``check``'s groups stand: which did not fit, and why the horizon is short, if it is
    (a clock short of its value in ``thresholds``: a claim's own, ``claims.thresholds_of``)."""
    regime = Regime()
    for group in check.compared:
        fit, total = fit_counts(group.cells)
        regime.runs += total
        if fit < total:
            regime.unfit_runs += total - fit
            regime.unfit.append(unfit_text(group))
        last, trained = at_edge(group)
        if trained and last > EDGE_SHARE * trained:
            regime.short.append(f"{group.label()} selected at its last epoch in {last} of {trained} runs")
    for group, clock in check.clocked:
        reached, needed = getattr(group.summary, clock), thresholds[clock]
        if not reached >= needed:
            regime.short.append(f"{group.label()} {CLOCK_SYMBOLS[clock]} {reached:.3g} < {needed:g}")
    return regime
