"""How a claim's numbers become its verdict, and the record of one finding.

Every claim (``report/claims.py``: the paper's and any plugin's) is written as quantities
*claimed above zero*: a difference of debiased spreads (SGD − Adam), a margin less a spread
(0.25 × SGD's spread − Adam's: Adam keeps at most a quarter of SGD's memory), a share less a
threshold. The rule is one for all:

- *reproduced* when the 95% interval of every quantity excludes zero above it (an
  intersection-union test: its false-positive rate is at most one quantity's 2.5%);
- *contradicted* when any one of the k quantities excludes zero below it at the Bonferroni level
  1 − 0.05/k (so the chance that some quantity contradicts by noise stays at 2.5%);
- *cannot be decided* when a quantity rests on fewer trained seeds than the rule was calibrated
  for (``inference.MIN_SEEDS``); *not resolved at this scale* otherwise.

Before any of these, the regime (``report/regime.py``, ``regime_verdict``): *under-trained*, *not
converged* or *horizon short of the mechanism*. An equivalence ("near zero") is a quantity of this kind too: the
margin less the spread, claimed above zero (docs/STATISTICS.md, "Verdicts").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from initmem_core.report.inference import (
    LEVEL,
    MIN_SEEDS,
    NAN,
    POPULATION,
    SpreadDifference,
    SpreadEstimate,
    mean_interval,
)
from initmem_core.report.regime import Regime

REPRODUCED, CONTRADICTED, NOT_RESOLVED, NOT_EVALUATED, CANNOT_DECIDE = (
    "reproduced",
    "contradicted",
    "not resolved at this scale",
    "not evaluated",
    "cannot be decided: too few seeds",
)
UNDER_TRAINED, NOT_CONVERGED, HORIZON_SHORT = "under-trained", "not converged", "horizon short of the mechanism"
#: The verdicts of a comparison outside the paper's regime, the first that applies first: it decides
#: nothing either way.
OUT_OF_REGIME = (UNDER_TRAINED, NOT_CONVERGED, HORIZON_SHORT)
VERDICTS = (REPRODUCED, CONTRADICTED, NOT_RESOLVED, NOT_EVALUATED, CANNOT_DECIDE, *OUT_OF_REGIME)
#: What an interval over seeds alone is for (norms, interpolation shares: no test set enters them).
SEEDS_ONLY = "the runs (no test set enters it)"


def bonferroni_level(comparisons: int, level: float = LEVEL) -> float:
    """The level of each of ``comparisons`` intervals when any one of them decides."""
    return 1 - (1 - level) / max(comparisons, 1)


@dataclass(frozen=True)
class Quantity:
    """One number a claim decides on, claimed above zero: its estimate and 95% interval, what that
    interval is for (``inference.POPULATION``, ``inference.THIS_TEST_SET`` or ``SEEDS_ONLY``), and
    the interval at any other level (``at``, for the Bonferroni rule)."""

    label: str
    estimate: float
    lo: float
    hi: float
    unit: str = "pp"
    interval_for: str = POPULATION
    reason: str = ""  # why there is no interval
    too_few_seeds: bool = False
    at: Callable[[float], tuple[float, float]] | None = field(default=None, compare=False, repr=False)

    @property
    def decided(self) -> bool:
        return not (math.isnan(self.lo) or math.isnan(self.hi))

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        if not self.decided:
            return NAN, NAN
        if level == LEVEL:
            return self.lo, self.hi
        return self.at(level) if self.at is not None else (NAN, NAN)

    @property
    def verdict(self) -> str:
        return verdict_of([self])


def from_spread(label: str, found: SpreadEstimate | SpreadDifference, unit: str = "pp") -> Quantity:
    """A group's debiased spread, or a difference of two (a − b), claimed above zero."""
    at = found.interval_at if found.decided else None
    too_few = "too few seeds" in found.reason
    return Quantity(label, found.estimate, found.lo, found.hi, unit, found.interval_for, found.reason, too_few, at)


def from_seeds(label: str, values: list[float], unit: str = "", threshold: float = 0.0) -> Quantity:
    """The mean of per-seed ``values`` less ``threshold``, with its t interval over the seeds."""
    mean = sum(values) / len(values) - threshold if values else NAN
    lo, hi = mean_interval([v - threshold for v in values])
    return Quantity(
        label,
        mean,
        lo,
        hi,
        unit,
        SEEDS_ONLY,
        "" if len(values) >= 2 else f"{len(values)} seed(s)",
        len(values) < MIN_SEEDS,
        lambda level: mean_interval([v - threshold for v in values], level),
    )


def negated(quantity: Quantity, label: str) -> Quantity:
    """``quantity`` claimed below zero, as a quantity claimed above it."""
    at = quantity.at

    def flipped(level: float) -> tuple[float, float]:
        assert at is not None
        low, high = at(level)
        return -high, -low

    return replace(
        quantity,
        label=label,
        estimate=-quantity.estimate,
        lo=-quantity.hi,
        hi=-quantity.lo,
        at=flipped if at is not None else None,
    )


def decide(intervals: list[tuple[float, float]], against: list[tuple[float, float]] | None = None) -> str:
    """The rule on bare intervals each claimed above zero: reproduced when every 95% interval is
    above zero; contradicted when any of ``against`` (the same at the Bonferroni level, default
    ``intervals``) is below zero."""
    against = intervals if against is None else against
    if not intervals or any(math.isnan(low) or math.isnan(high) for low, high in intervals + against):
        return NOT_RESOLVED
    if any(high < 0 for _, high in against):
        return CONTRADICTED
    if all(low > 0 for low, _ in intervals):
        return REPRODUCED
    return NOT_RESOLVED


def regime_verdict(quantities: list[Quantity], regime: Regime) -> tuple[str, list[str]]:
    """The rule over ``quantities`` within ``regime`` (module docstring), and the regime's reasons
    to show beside it (a reproduction at a short horizon stands, with the reason as a flag)."""
    if not quantities:
        return NOT_EVALUATED, []
    if not regime.fits:
        return UNDER_TRAINED, [regime.under_trained_text()]
    if regime.unconverged:  # a spread read before every sigma converged is partly a horizon
        return NOT_CONVERGED, ["; ".join(regime.unconverged)]
    verdict = verdict_of(quantities)
    if regime.short and verdict in (CONTRADICTED, NOT_RESOLVED):
        return HORIZON_SHORT, [regime.short_text()]
    return verdict, [regime.short_text()] if regime.short else []


def verdict_of(quantities: list[Quantity]) -> str:
    """The module's rule over ``quantities`` (from every stratum of a claim together)."""
    if not quantities:
        return NOT_EVALUATED
    if any(q.too_few_seeds for q in quantities):
        return CANNOT_DECIDE
    corrected = bonferroni_level(len(quantities))
    return decide([q.interval() for q in quantities], [q.interval(corrected) for q in quantities])


@dataclass
class Finding:
    """One claim's outcome on a sweep. ``name``: the claim's registered name (what the JSON key, the
    parent run's tag and the figure use); ``quantities``: every number the verdict was decided on,
    from every stratum; ``margin``: the margin the claim was fixed with, in words, if it has one;
    ``parts``: the claim within each stratum (groups that differ in nothing but the claim's axis),
    each with its own verdict, when the sweep has more than one; ``stratum``: which one this is;
    ``needs``: when not evaluated, the groups the claim would need; ``notes``: lines that inform
    the reading but do not decide (a weaker margin, a dose-response); ``regime``: why the verdict
    is out of the regime (``report/regime.py``), or the flags a verdict that stands carries;
    ``plugin``: the plugin that registered it; ``error``: why it failed, when it raised (not evaluated)."""

    claim: str
    measured: str
    verdict: str
    name: str = ""
    quantities: list[Quantity] = field(default_factory=list)
    margin: str = ""
    parts: list[Finding] = field(default_factory=list)
    stratum: str = ""
    needs: str = ""
    notes: list[Quantity] = field(default_factory=list)
    regime: list[str] = field(default_factory=list)
    plugin: str = ""
    error: str = ""

    @property
    def left_out(self) -> str:
        """Why it was not evaluated: the groups it would need, or "failed: <error> (plugin X)"."""
        return f"failed: {self.error} (plugin {self.plugin})" if self.error else self.needs or self.measured

    @property
    def verdict_text(self) -> str:
        """The verdict with the regime's reasons: "under-trained: 5 of 12 runs did not fit (...)",
        "horizon short of the mechanism: adam T_adapt 0.51 < 3"; a verdict that stands with its
        flags in brackets: "reproduced (flagged: sgd b=32 selected at its last epoch in 20 of 24 runs)"."""
        if not self.regime:
            return self.verdict
        reasons = "; ".join(self.regime)
        return f"{self.verdict}: {reasons}" if self.verdict in OUT_OF_REGIME else f"{self.verdict} (flagged: {reasons})"

    @property
    def reproduced(self) -> bool | None:
        """True: reproduced; False: contradicted; None: not resolved or not evaluated."""
        return {REPRODUCED: True, CONTRADICTED: False}.get(self.verdict)

    @property
    def key(self) -> Quantity | None:
        """The quantity that decides: the one whose interval is least clear of zero."""
        decided = [q for q in self.quantities if q.decided]
        if decided:
            return min(decided, key=lambda q: q.lo)
        return self.quantities[0] if self.quantities else None
