"""The claim kind: the helpers every claim is written with, and every registered claim evaluated on
a sweep (``evaluate_claims``).

A claim is a plugin component (``hookspecs.initmem_register_claims``): a function of the sweep view
(``report/claim_groups.py``) that returns a ``Finding`` (``report/verdicts.py``), with what it
declares beside it (``contracts.ClaimInfo``). The paper's claims are one such plugin
(``initmem_plugins.claims``). A claim compares like with like: ``per_stratum`` evaluates it in each
stratum along its axis, keeps each stratum's verdict (``Finding.parts``) and decides over the
quantities of every stratum together, by the one rule of ``report/verdicts.py``. A claim whose
groups are missing is *not evaluated* and says which groups it would need (``Finding.needs``).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from initmem_core.errors import RunWarning
from initmem_core.plugin_system.loader import get_registry
from initmem_core.plugin_system.registry import ComponentSpec, Registry
from initmem_core.report.claim_groups import Group, Sweep
from initmem_core.report.inference import LEVEL, MIN_SEEDS, Matrix, measured_sigmas, spread_difference
from initmem_core.report.regime import CLOCK_THRESHOLDS, Check, assess
from initmem_core.report.render import quantity_cell
from initmem_core.report.verdicts import (
    NOT_EVALUATED,
    OUT_OF_REGIME,
    SEEDS_ONLY,
    Finding,
    Quantity,
    from_spread,
    regime_verdict,
    verdict_of,
)

#: The kind claims register as (``kinds.REPORT_KINDS``).
CLAIM = "claim"


class ClaimEvaluator(Protocol):
    """A claim: from the sweep view (``initmem_core.report.claim_groups.Sweep``: the report, its
    groups with their optimizer family and clocks, its strata along an axis) to its ``Finding``
    (``initmem_core.report.verdicts``), built with the helpers here (``per_stratum``, ``difference``,
    the verdict rule and the regime checks)."""

    def __call__(self, sweep: Sweep) -> Finding: ...


#: What a stratum's evaluation gives: its measured text, the quantities it decides on, its notes,
#: and what it compared (the groups whose runs must fit, those whose clock must have run: regime.py).
Evaluated = tuple[str, list[Quantity], list[Quantity], Check]


def difference(label: str, a: Matrix, b: Matrix) -> Quantity:
    """The debiased spread of ``a`` minus that of ``b`` over the sigmas both measured. Fewer than two
    shared sigmas because sigmas were left out for too few trained runs (a one-seed sweep) is too few
    seeds, not groups that measured different sigmas."""
    found = from_spread(label, spread_difference(a, b))
    if not found.decided and (measured_sigmas(a)[1] or measured_sigmas(b)[1]):
        found = dataclasses.replace(found, too_few_seeds=True)
    return found


def per_stratum(
    sweep: Sweep,
    name: str,
    claim: str,
    axis: Iterable[str],
    evaluate: Callable[[list[Group]], Evaluated | None],
    needs: str,
    margin: str = "",
) -> Finding:
    """``claim`` evaluated in every stratum of ``sweep`` along ``axis`` that has its groups, and
    decided over all their quantities together (module docstring)."""
    parts = []
    for stratum, groups in sweep.strata(axis):
        found = evaluate(groups)
        if found is None:
            continue
        measured, quantities, notes, check = found
        verdict, regime = regime_verdict(quantities, assess(check, sweep.thresholds))
        parts.append(Finding(claim, measured, verdict, name, quantities, margin, [], stratum, "", notes, regime))
    if not parts:
        return Finding(claim, "groups missing from the sweep", NOT_EVALUATED, name, margin=margin, needs=needs)
    if len(parts) == 1:
        return parts[0]
    # The rule over the strata inside the regime; with none inside it, the first of OUT_OF_REGIME any stratum reads.
    inside = [part for part in parts if part.verdict not in OUT_OF_REGIME]
    if inside:
        verdict = verdict_of([q for part in inside for q in part.quantities])
    else:
        verdict = next(kind for kind in OUT_OF_REGIME if any(part.verdict == kind for part in parts))
    quantities = [q for part in inside or parts for q in part.quantities]
    notes = [q for part in parts for q in part.notes]
    measured = " || ".join(f"[{part.stratum}] {part.measured} → {part.verdict}" for part in parts)
    regime = [f"[{part.stratum}] {part.verdict_text}" for part in parts if part.regime]
    return Finding(claim, measured, verdict, name, quantities, margin, parts, notes=notes, regime=regime)


def texts(quantities: list[Quantity], verdicts: bool = False) -> str:
    return "; ".join(quantity_cell(q) + (f" ({q.verdict})" if verdicts else "") for q in quantities)


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


# -- the registered claims --------------------------------------------------------------------


def claim_specs(registry: Registry | None = None) -> list[ComponentSpec]:
    """Every registered claim, in registration order (the paper's first, in its order)."""
    registry = get_registry() if registry is None else registry
    return list(registry.components.get(CLAIM, {}).values())


def thresholds_of(spec: ComponentSpec) -> Mapping[str, float]:
    """The clock thresholds a claim's regime checks use: ``regime.CLOCK_THRESHOLDS``, with the
    claim's own threshold for its declared clock."""
    info = spec.info
    if not info.clock or info.threshold is None:
        return CLOCK_THRESHOLDS
    return {**CLOCK_THRESHOLDS, info.clock: float(info.threshold)}


def evaluate_claim(spec: ComponentSpec, sweep: Sweep) -> Finding:
    """One claim on ``sweep``, named as registered. A claim that raises is not evaluated, with its
    error as what it needs, and a one-line warning: it takes no other claim down."""
    try:
        found = spec.load_factory()(dataclasses.replace(sweep, thresholds=thresholds_of(spec)))
        if not isinstance(found, Finding):
            raise TypeError(f"returned {type(found).__name__}, not a Finding")
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as error:
        text = " ".join(f"{type(error).__name__}: {error}".split())
        warnings.warn(f"claim '{spec.name}' ({spec.provider}) failed: {text}", RunWarning, stacklevel=2)
        return Finding(
            spec.description, "the claim failed", NOT_EVALUATED, spec.name, needs=f"a claim that runs ({text})"
        )
    return found if found.name == spec.name else dataclasses.replace(found, name=spec.name)


def claim_named(name: str, registry: Registry | None = None) -> ComponentSpec:
    """The registered claim ``name`` (an ``UnknownComponentError`` naming the others otherwise)."""
    registry = get_registry() if registry is None else registry
    return registry.lookup(CLAIM, name)[0]


def evaluate_claims(sweep: Sweep, registry: Registry | None = None) -> list[Finding]:
    """Every registered claim on one sweep, in registration order."""
    return [evaluate_claim(spec, sweep) for spec in claim_specs(registry)]
