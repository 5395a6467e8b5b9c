"""The claim API: what a claim plugin is written with, in one module on the stable surface (its
reference in docs/plugins.md is generated from it).

A claim is ``f(sweep: Sweep) -> Finding``, registered once with ``initmem_register_claims``: its name,
statement and ``ClaimInfo`` (axis, quantities, margin, clock, threshold). The report evaluates it with
that registration on the sweep view (``Sweep.claim``), which ``per_stratum`` reads its axis, name,
statement and margin from and ``Sweep.verdict`` its clock thresholds; ``Claim.finding`` builds a
``Finding`` of it by hand. A claim that raises is reported as failed, with its error and its plugin.
"""

from initmem_core.kinds import ClaimInfo  # noqa: F401
from initmem_core.report.claim_groups import OPTIMIZER_AXIS, UNKNOWN_FAMILY, Claim, Group, Sweep, settings  # noqa: F401
from initmem_core.report.claims import Evaluated, difference, per_stratum, texts  # noqa: F401
from initmem_core.report.inference import MIN_SEEDS  # noqa: F401
from initmem_core.report.regime import CLOCK_THRESHOLDS, Check  # noqa: F401
from initmem_core.report.render import quantity_cell  # noqa: F401
from initmem_core.report.verdicts import Finding, Quantity, from_seeds, from_spread, negated, verdict_of  # noqa: F401
from initmem_core.vocabulary import ADAPTIVE_FAMILY, CLOCK_ADAPT, CLOCK_L2, CLOCK_SGD, CLOCK_SYMBOLS, SGD_FAMILY  # noqa: F401

# isort: split
from initmem_core.report.verdicts import CANNOT_DECIDE, CONTRADICTED, NOT_EVALUATED, NOT_RESOLVED, REPRODUCED  # noqa: F401

# isort: split
from initmem_core.report.verdicts import HORIZON_SHORT, NOT_CONVERGED, SEEDS_ONLY, UNDER_TRAINED  # noqa: F401
