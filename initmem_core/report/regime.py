"""The regime a verdict needs (docs/STATISTICS.md, "The regime a verdict needs"), checked on the
groups a claim compares before its verdict stands: every run's selected predictor must *fit* its
training set (else ``UNDER_TRAINED``); every sigma of a group whose spread is read as memory must have
*converged*: at most ``EDGE_SHARE`` of its trained runs selected at the horizon's edge (the last
``EDGE_FRACTION`` of the epochs a run trained, a run stopped by its own ``--patience`` never; else
``NOT_CONVERGED``); and a group whose forgetting a claim could contradict must have run its mechanism's
clock to ``CLOCK_THRESHOLDS`` (else ``HORIZON_SHORT``). The constants were fixed before the runs they
govern (docs/PREREGISTRATION.md holds them too, and a test keeps the two equal).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from initmem_core.tracking.records import CellRecord, fit_counts
from initmem_core.vocabulary import (
    BEST_VAL_EPOCH,
    CLOCK_ADAPT,
    CLOCK_L2,
    CLOCK_SGD,
    CLOCK_SYMBOLS,
    STOP_PATIENCE,
    STOP_UNTIL,
)


class Group(Protocol):
    """What the checks read of a compared group (``claim_groups.Group``, which imports the report)."""

    cells: list[CellRecord]
    summary: Any  # memory.GroupSummary: its clocks

    def label(self) -> str: ...


#: The clock value a mechanism must reach before a claim that it makes a group forget can be
#: contradicted: "well past 1", as 3 (docs/STATISTICS.md gives the paper's own setting against it).
CLOCK_THRESHOLDS = {CLOCK_SGD: 3.0, CLOCK_L2: 3.0, CLOCK_ADAPT: 3.0}
#: A sigma of a group has not converged when more than this share of its trained runs are at the edge.
EDGE_SHARE = 0.5
#: A run is at the horizon's edge when its best-validation epoch is its last evaluated epoch or lies in
#: the last this share of the epochs it trained (the last 3 of 30): its selection criterion was still
#: improving when training ended. A run stopped by its own patience is never at the edge.
EDGE_FRACTION = 0.1


@dataclass(frozen=True)
class Check:
    """What one evaluation of a claim compared: every group whose runs must fit (``compared``), the
    groups whose mechanism must have acted, each with its clock (``clocked``), and whether every sigma
    of every compared group must have converged (``converged``: a claim that reads a spread as memory;
    a claim about norms or half-lives over training passes False)."""

    compared: tuple[Group, ...]
    clocked: tuple[tuple[Group, str], ...] = ()
    converged: bool = True

    @classmethod
    def of(cls, compared: Iterable[Group], clocked: Iterable[tuple[Group, str]] = (), converged: bool = True) -> Check:
        return cls(tuple({id(g): g for g in compared}.values()), tuple(clocked), converged)


@dataclass
class Regime:
    """Where a comparison stands against the regime: the groups with runs that did not fit (and the
    counts), the sigmas that had not converged, and the reasons its horizon is short."""

    unfit: list[str] = field(default_factory=list)
    unfit_runs: int = 0
    runs: int = 0
    unconverged: list[str] = field(default_factory=list)
    short: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.unfit

    def under_trained_text(self) -> str:
        return f"{self.unfit_runs} of {self.runs} runs did not fit ({'; '.join(self.unfit)})"

    def short_text(self) -> str:
        return "; ".join(self.short)


def by_sigma(group: Group, count: Callable[[Iterable[CellRecord]], tuple[int, int]], text: str, bad) -> list[str]:
    """``text`` (its fields n, total and sigma) for each sigma of ``group`` whose runs' ``count`` is ``bad``."""
    sigmas = sorted({c.config.sigma for c in group.cells})
    counts = {s: count(c for c in group.cells if c.config.sigma == s) for s in sigmas}
    return [text.format(n=n, total=total, sigma=s) for s, (n, total) in counts.items() if total and bad(n, total)]


def unfit_text(group: Group) -> str:
    """Which sigmas of ``group`` have runs that did not fit, as "sgd b=128: 0/3 at sigma 2.5, 1/3 at 1.4"."""
    parts = by_sigma(group, fit_counts, "{n}/{total} fit at sigma {sigma:g}", lambda fit, ran: fit < ran)
    return f"{group.label()}: {', '.join(parts)}"


def at_edge(cell: CellRecord) -> bool | None:
    """Whether ``cell`` was selected at its horizon's edge (``EDGE_FRACTION``); None when it did not
    train or carries no history to tell."""
    best, last = cell.metrics.get(BEST_VAL_EPOCH), last_epoch(cell)
    if not cell.trained or best is None or math.isinf(last):
        return None
    if cell.config.patience and cell.stop_reason in (STOP_PATIENCE, STOP_UNTIL):
        return False  # stopped once its criterion had not improved for --patience evaluations
    return best >= last or best > last * (1 - EDGE_FRACTION)


def edge_counts(cells: Iterable[CellRecord]) -> tuple[int, int]:
    """(runs selected at the horizon's edge, runs that can tell) among ``cells``."""
    known = [edge for edge in map(at_edge, cells) if edge is not None]
    return sum(known), len(known)


def unconverged_sigmas(group: Group) -> list[str]:
    """Each sigma of ``group`` where more than ``EDGE_SHARE`` of its runs sit at the edge, as
    "6/6 selected at the horizon's edge at sigma 2.5"."""
    text = "{n}/{total} selected at the horizon's edge at sigma {sigma:g}"
    return by_sigma(group, edge_counts, text, lambda edge, known: edge > EDGE_SHARE * known)


def last_epoch(cell: CellRecord) -> float:
    """The last epoch any of the cell's histories reached (inf: none has a point)."""
    return max((epoch for history in cell.histories.values() for epoch, _ in history), default=math.inf)


def assess(check: Check, thresholds: Mapping[str, float] = CLOCK_THRESHOLDS) -> Regime:
    """Where ``check``'s groups stand: which did not fit, and why the horizon is short, if it is
    (a clock short of its value in ``thresholds``: a claim's own, ``claim_groups.Claim.thresholds``)."""
    regime = Regime()
    for group in check.compared:
        fit, total = fit_counts(group.cells)
        regime.runs += total
        if fit < total:
            regime.unfit_runs += total - fit
            regime.unfit.append(unfit_text(group))
        if check.converged and (sigmas := unconverged_sigmas(group)):
            regime.unconverged.append(f"{group.label()}: {', '.join(sigmas)}")
    for group, clock in check.clocked:
        reached, needed = getattr(group.summary, clock), thresholds[clock]
        if not reached >= needed:
            regime.short.append(f"{group.label()} {CLOCK_SYMBOLS[clock]} {reached:.3g} < {needed:g}")
    return regime
