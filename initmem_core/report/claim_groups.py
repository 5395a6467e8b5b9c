"""What the claims read: a sweep's groups, each with its optimizer family and forgetting clock, and
the strata that keep every comparison like with like (docs/STATISTICS.md, "Like with like: strata").

A claim's *axis* is the settings its comparison is about; its *strata* are the sets of groups that
agree on every other setting that tells groups apart (``Sweep.strata``). Whether an optimizer is
SGD-like or adaptive comes from the clock convention its plugin declares (as each run logged it,
else as the installed plugin declares it), never from its name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from initmem_core.config import FIELDS, RunConfig
from initmem_core.errors import InitmemError
from initmem_core.kinds import ClaimInfo
from initmem_core.plugin_system.loader import get_registry
from initmem_core.report.inference import Matrix
from initmem_core.report.memory import GroupSummary, Report, build_report, cells_by_group
from initmem_core.report.regime import CLOCK_THRESHOLDS, Check, assess, last_epoch
from initmem_core.report.render import interval
from initmem_core.report.verdicts import Finding, Quantity, regime_verdict
from initmem_core.tracking.records import CellRecord
from initmem_core.training.clocks import CONVENTION_FAMILIES
from initmem_core.vocabulary import ADAPTIVE_FAMILY, CLOCK_ADAPT, CLOCK_L2, CLOCK_SGD

#: The settings a comparison of optimizers lets differ: the optimizer and its own settings.
OPTIMIZER_AXIS = ("opt", "lr", "momentum", "weight_decay", "opt_arg")
#: A family whose clock convention no record logged and no installed plugin declares.
UNKNOWN_FAMILY = "unknown"


def declared_convention(opt: str) -> str:
    """The clock convention the installed plugin of optimizer ``opt`` declares ("" if it declares none
    or none is installed)."""
    try:
        spec, variant = get_registry().lookup("optimizer", opt)
        return spec.info.declared_clock(variant)
    except (InitmemError, ImportError, KeyError, AttributeError):
        return ""


def optimizer_family(record: CellRecord) -> str:
    """``vocabulary.SGD_FAMILY`` or ``ADAPTIVE_FAMILY``: from the convention the run logged, else the
    one its plugin declares; ``UNKNOWN_FAMILY`` when neither says (an optimizer whose plugin declares
    no clock belongs to no family: ``training.clocks.UNDECLARED``)."""
    convention = record.clock_convention or declared_convention(record.config.opt)
    return CONVENTION_FAMILIES.get(convention, UNKNOWN_FAMILY)


def forgetting_clock(family: str, clock_sgd: float, clock_l2: float, clock_adapt: float) -> float:
    """Adaptive methods run on T_adapt; SGD forgets through its noise and its explicit decay, T_SGD + T_L2."""
    return clock_adapt if family == ADAPTIVE_FAMILY else clock_sgd + clock_l2


def mechanism_clock(config: RunConfig, family: str) -> str:
    """The clock of the mechanism by which a group forgets: adaptive methods T_adapt; SGD-like ones
    with L2 or weight decay T_L2; without, T_SGD."""
    if family == ADAPTIVE_FAMILY:
        return CLOCK_ADAPT
    return CLOCK_L2 if config.l2 + config.weight_decay > 0 else CLOCK_SGD


def settings(config: RunConfig, free: Iterable[str]) -> tuple:
    """Every setting of ``config`` that tells groups apart (not execution knobs) but sigma, seed and ``free``."""
    left_out = {"sigma", "seed", *free}
    return tuple(
        (name, repr(getattr(config, name)))
        for name, f in FIELDS.items()
        if f.metadata["hashed"] and name not in left_out
    )


@dataclass
class Group:
    """One group of a sweep as the claims read it: its summary, first config, family, cells and
    accuracy table (pp by sigma and seed, trained cells, with their per-example records)."""

    summary: GroupSummary
    config: RunConfig
    family: str
    cells: list[CellRecord]
    accuracy: Matrix
    clock: float  # the clock that drives this group's forgetting (forgetting_clock)
    #: ``config`` with an ``--until`` target replaced by the epochs it set (``as_trained``): what
    #: a group is compared by, so a group trained to a clock and one given those epochs are alike
    trained: RunConfig | None = None

    @property
    def compared(self) -> RunConfig:
        return self.trained or self.config

    @property
    def shrink(self) -> float:
        """lambda: every force that shrinks the weights (the L2 coefficient and weight decay)."""
        return self.config.l2 + self.config.weight_decay

    def label(self) -> str:
        """The optimizer and the settings that tell optimizer lines apart, rate and batch always:
        "sgd lr=0.01 b=32", "sgd lr=0.01 m=0.9 b=32 wd=0.0005", "adam lr=0.004 b=32 matched"."""
        config = self.config
        parts = [config.opt, *([f"lr={config.lr:g}"] if config.lr else [])]
        parts += [f"m={config.momentum:g}"] if config.momentum else []
        parts += [f"b={config.batch_size}"]
        parts += [f"wd={config.weight_decay:g}"] if config.weight_decay else []
        parts += [f"l2={config.l2:g}"] if config.l2 else []
        parts += ["matched"] if config.lr_match_sigma else []
        return " ".join(parts)

    def spread_text(self) -> str:
        s = self.summary
        return (
            f"{self.label()} {s.spread:.2f} pp (debiased {s.debiased_spread:+.2f} "
            f"{interval(s.debiased_spread_lo, s.debiased_spread_hi)})"
        )


@dataclass(frozen=True)
class Claim:
    """The claim reading a sweep as its plugin registered it (``claims.evaluate_claim`` puts it on the
    view). ``thresholds``: ``regime.CLOCK_THRESHOLDS`` with its own for its declared clock."""

    name: str = ""
    statement: str = ""
    plugin: str = ""
    info: ClaimInfo = ClaimInfo()

    @property
    def thresholds(self) -> Mapping[str, float]:
        clock, threshold = self.info.clock, self.info.threshold
        return CLOCK_THRESHOLDS if not clock or threshold is None else {**CLOCK_THRESHOLDS, clock: float(threshold)}

    def finding(self, measured: str, verdict: str, quantities: Iterable[Quantity] = (), **fields: Any) -> Finding:
        """A ``Finding`` of this claim: its statement, name, margin and plugin as registered."""
        margin, plugin = self.info.margin, self.plugin
        return Finding(self.statement, measured, verdict, self.name, list(quantities), margin, plugin=plugin, **fields)


@dataclass
class Sweep:
    """What every claim reads: the report, the groups it can name and the claim reading it."""

    report: Report
    groups: list[Group]
    #: every group's cells, trained or not, by group key (the depth claim counts runs that never trained)
    cells: dict[str, list[CellRecord]] = field(default_factory=dict)
    claim: Claim = Claim()

    def verdict(self, quantities: list[Quantity], check: Check) -> tuple[str, list[str]]:
        """``verdicts.regime_verdict`` of ``quantities`` in the regime of ``check``, at the claim's thresholds."""
        return regime_verdict(quantities, assess(check, self.claim.thresholds))

    def strata(self, axis: Iterable[str]) -> list[tuple[str, list[Group]]]:
        """The groups in sets that agree on every setting but ``axis`` (and sigma and seed), each
        named by the settings that tell it from the others ("" when there is one)."""
        axis = tuple(axis)
        by_key: dict[tuple, list[Group]] = {}
        for group in self.groups:
            by_key.setdefault(settings(group.compared, axis), []).append(group)
        varying = [
            name
            for position, (name, _) in enumerate(next(iter(by_key)) if by_key else ())
            if len({key[position][1] for key in by_key}) > 1
        ]
        named = []
        for key, groups in by_key.items():
            values = dict(key)
            named.append((", ".join(f"{name}={values[name].strip(chr(39))}" for name in varying), groups))
        return sorted(named, key=lambda pair: pair[0])


def as_trained(config: RunConfig, cells: Iterable[CellRecord]) -> RunConfig:
    """``config`` as its cells trained it: with an ``--until`` target, the epochs the target set
    (the last epoch of the trained cells' histories) in place of the target and its cap."""
    if not config.until:
        return config
    last = [last_epoch(c) for c in cells if c.trained and any(c.histories.values())]
    return config.replace(epochs=max(last), until="") if last else config


def read_sweep(records: Iterable[CellRecord]) -> Sweep:
    records = list(records)
    report, cells = build_report(records), cells_by_group(records)
    groups = []
    for summary in report.groups:
        if math.isnan(summary.spread):  # did not train, or one sigma: nothing to compare
            continue
        first = cells[summary.group][0]
        family = optimizer_family(first)
        groups.append(
            Group(
                summary,
                first.config,
                family,
                cells[summary.group],
                report.accuracy[summary.group],
                forgetting_clock(family, summary.clock_sgd, summary.clock_l2, summary.clock_adapt),
                as_trained(first.config, cells[summary.group]),
            )
        )
    return Sweep(report, groups, cells)
