"""The claim kind: the helpers every claim is written with (``claim_api`` is their public face), and
every registered claim evaluated on a sweep (``evaluate_claims``).

A claim (``hookspecs.initmem_register_claims``) is a function of the sweep view (``claim_groups.Sweep``,
which carries its registration) returning a ``Finding``. ``per_stratum`` evaluates it in each stratum
along its axis, keeps each stratum's verdict (``Finding.parts``) and decides over the quantities of
every stratum together, by the one rule of ``report/verdicts.py``. A claim whose groups are missing
is *not evaluated* and says what it would need (``Finding.needs``); one that raises, why (``Finding.error``).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Protocol

from initmem_core.errors import RunWarning
from initmem_core.plugin_system.loader import get_registry
from initmem_core.plugin_system.registry import ComponentSpec, Registry
from initmem_core.report.claim_groups import Claim, Group, Sweep
from initmem_core.report.inference import Matrix, measured_sigmas, spread_difference
from initmem_core.report.regime import Check
from initmem_core.report.render import quantity_cell
from initmem_core.report.verdicts import NOT_EVALUATED, OUT_OF_REGIME, Finding, Quantity, from_spread, verdict_of

#: The kind claims register as (``kinds.REPORT_KINDS``).
CLAIM = "claim"


class ClaimEvaluator(Protocol):
    """A claim: from the sweep view (``Sweep``: the report, its groups, the claim's registration) to
    its ``Finding``, written with ``initmem_core.report.claim_api``."""

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


def per_stratum(sweep: Sweep, evaluate: Callable[[list[Group]], Evaluated | None], needs: str) -> Finding:
    """The claim reading ``sweep`` (``sweep.claim``, as registered) evaluated in every stratum along
    its axis that has its groups, and decided over all their quantities together (module docstring);
    ``needs``: what it would need where no stratum has its groups."""
    claim = sweep.claim
    if not claim.name:
        raise ValueError("per_stratum reads the claim's registration: evaluate it with claims.evaluate_claim")
    parts = []
    for stratum, groups in sweep.strata(claim.info.axis):
        found = evaluate(groups)
        if found is None:
            continue
        measured, quantities, notes, check = found
        verdict, regime = sweep.verdict(quantities, check)
        parts.append(claim.finding(measured, verdict, quantities, stratum=stratum, notes=notes, regime=regime))
    if not parts:
        return claim.finding("groups missing from the sweep", NOT_EVALUATED, needs=needs)
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
    return claim.finding(measured, verdict, quantities, parts=parts, notes=notes, regime=regime)


def texts(quantities: list[Quantity], verdicts: bool = False) -> str:
    """``quantities`` as a claim's measured text shows them, each with its verdict when ``verdicts``."""
    return "; ".join(quantity_cell(q) + (f" ({q.verdict})" if verdicts else "") for q in quantities)


# -- the registered claims --------------------------------------------------------------------


def claim_specs(registry: Registry | None = None) -> list[ComponentSpec]:
    """Every registered claim, in registration order (the paper's first, in its order)."""
    registry = get_registry() if registry is None else registry
    return list(registry.components.get(CLAIM, {}).values())


def evaluate_claim(spec: ComponentSpec, sweep: Sweep) -> Finding:
    """One claim on ``sweep``, which it reads with its registration (``Sweep.claim``) and answers
    for under its registered name. A claim that raises is not evaluated, with its error (``Finding.error``)
    and a one-line warning: it takes no other claim down."""
    claim = Claim(spec.name, spec.description, spec.provider.plugin, spec.info)
    try:
        found = spec.load_factory()(dataclasses.replace(sweep, claim=claim))
        if not isinstance(found, Finding):
            raise TypeError(f"returned {type(found).__name__}, not a Finding")
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as error:
        text = " ".join(f"{type(error).__name__}: {error}".split())
        warnings.warn(f"claim '{spec.name}' ({spec.provider}) failed: {text}", RunWarning, stacklevel=2)
        return claim.finding("the claim failed", NOT_EVALUATED, error=text)
    return dataclasses.replace(found, name=spec.name, plugin=claim.plugin)


def claim_named(name: str, registry: Registry | None = None) -> ComponentSpec:
    """The registered claim ``name`` (an ``UnknownComponentError`` naming the others otherwise)."""
    registry = get_registry() if registry is None else registry
    return registry.lookup(CLAIM, name)[0]


def evaluate_claims(sweep: Sweep, registry: Registry | None = None) -> list[Finding]:
    """Every registered claim on one sweep, in registration order."""
    return [evaluate_claim(spec, sweep) for spec in claim_specs(registry)]
