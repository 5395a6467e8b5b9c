"""The report with every registered claim evaluated on it: what ``initmem report`` and a sweep's
parent run show. One reading of the records: ``read_sweep`` builds the report, the claims read the
same groups (``report/claims.py``), and the report carries their findings (``Report.findings``);
``report/render.py`` writes them out, the figure ``verdicts`` (plugin ``figures``) draws them.
"""

from __future__ import annotations

from collections.abc import Iterable

from initmem_core.plugin_system.registry import Registry
from initmem_core.report.claim_groups import read_sweep
from initmem_core.report.claims import evaluate_claims
from initmem_core.report.memory import Report
from initmem_core.report.verdicts import NOT_EVALUATED, Finding
from initmem_core.tracking.records import CellRecord
from initmem_core.vocabulary import verdict_tag


def build_assessed_report(records: Iterable[CellRecord], registry: Registry | None = None) -> Report:
    """``memory.build_report`` of ``records`` with every claim registered (in ``registry``, default
    the process's) evaluated on it."""
    sweep = read_sweep(records)
    sweep.report.findings = evaluate_claims(sweep, registry)
    return sweep.report


def evaluated(findings: Iterable[Finding]) -> list[Finding]:
    """The findings a sweep's groups let the claims evaluate (any verdict but "not evaluated")."""
    return [f for f in findings if f.verdict != NOT_EVALUATED]


def verdict_tags(findings: Iterable[Finding]) -> dict[str, str]:
    """The parent run's tags: one per claim, ``initmem.verdict.<name>`` = its verdict (every claim,
    "not evaluated" too, so a relaunch that decides less replaces an older verdict)."""
    return {verdict_tag(f.name): f.verdict for f in findings}
