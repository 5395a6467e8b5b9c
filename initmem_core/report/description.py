"""The parent run's description (tag ``mlflow.note.content``): the report's headline table, the
claims' verdicts, and links to the prepared view (``tracking.ui_view``) and the report's figures."""

from __future__ import annotations

import math

from initmem_core.plugin_system.registry import Registry
from initmem_core.report.figures import figure_files
from initmem_core.report.memory import Report
from initmem_core.report.render import (
    DASH,
    debiased_cell,
    half_life_text,
    interval,
    markdown_table,
    number,
    quantity_cell,
    seeds_needed_cell,
    spread_cell,
)
from initmem_core.report.verdicts import NOT_EVALUATED, Finding
from initmem_core.tracking.ui_view import artifact_url, view_url
from initmem_core.vocabulary import CLOCK_SYMBOLS, CLOCKS


def claims_lines(findings: list[Finding]) -> list[str]:
    """The claims this sweep decided, each with its verdict and key interval (the parent run's
    ``initmem.verdict.<name>`` tags hold the same), and those it could not evaluate."""
    if not findings:
        return []
    done = [f for f in findings if f.verdict != NOT_EVALUATED]
    lines = ["", "**Claims on this sweep**, each with its plugin (key quantity claimed above zero, 95% interval):", ""]
    if done:
        rows = [[f"`{f.name}` ({f.plugin})", f.verdict_text, quantity_cell(f.key), f.margin or DASH] for f in done]
        escaped = [[cell.replace("|", "\\|") for cell in row] for row in rows]
        lines += markdown_table(["claim", "verdict", "key quantity", "margin"], escaped)
    else:
        lines += ["None could be evaluated on this sweep's groups."]
    left = [f for f in findings if f.verdict == NOT_EVALUATED]
    if left:
        lines += ["", "Not evaluated (each would need): " + "; ".join(f"`{f.name}`: {f.left_out}" for f in left)]
    return lines


def radial_half_life_text(report: Report, group: str) -> str:
    """The group's radial-memory half-life in epochs and in the clocks that moved, or the horizon
    reached without one."""
    found = report.forgetting.get(group)
    half = found.half_lives.get("radial") if found is not None else None
    if half is None:
        return DASH
    if not half.reached:
        return half_life_text(half)
    clocks = [f"{CLOCK_SYMBOLS[c]} {getattr(half, c):.3g}" for c in CLOCKS if not math.isnan(getattr(half, c))]
    return " · ".join([f"{half_life_text(half)} ep", *clocks])


def description(
    report: Report, sweep: str, experiment_id: str, parent_run_id: str, key: str, registry: Registry | None = None
) -> str:
    """Markdown for the parent run; its links are relative, so they work on any host. The report's
    figures are linked by the files the registered ones declare (``report/figures.py``)."""
    lines = [
        f"**initmem sweep `{sweep}`**: spread = max − min over sigma of the mean test accuracy at "
        "the best-validation checkpoint, in percentage points (the paper's figure, biased upward by noise); "
        "debiased = the cross-fitted spread with its 95% t interval, near 0 for a group that does not "
        "remember (docs/STATISTICS.md); radial half-life = when the slope of log ‖W‖ on log σ first fell to "
        "half its initial value, in epochs [95% interval] and in each clock (report.md has every memory).",
        "",
        *markdown_table(
            [
                "group",
                "spread pp",
                "95% interval",
                "debiased pp [95% interval]",
                "best σ",
                "worst σ",
                "failed cells",
                "radial half-life",
            ],
            [
                [
                    g.label,
                    spread_cell(g),
                    interval(g.spread_lo, g.spread_hi, ".2f"),
                    debiased_cell(g),
                    number(g.best_sigma, "g"),
                    number(g.worst_sigma, "g"),
                    str(g.failed),
                    radial_half_life_text(report, g.group),
                ]
                for g in report.groups
            ],
        ),
        *([f"Every group: {report.shared}."] if report.shared else []),
    ]
    lines += claims_lines(report.findings)
    unresolved = [p for p in report.pairs if p.seeds_needed is not None or p.seeds_needed_note]
    if unresolved:
        lines += [
            "",
            "Not resolved at this scale (debiased spread difference a − b, 95% interval for "
            f"{'the population' if all(p.interval_for == 'population' for p in unresolved) else 'this test set'}): "
            "the seeds per sigma a new sweep needs to resolve it with 80% power if the true difference were the "
            "observed one.",
            "",
            *markdown_table(
                ["a − b", "difference pp [95% interval]", "next step"],
                [
                    [
                        f"{report.label(p.a)} − {report.label(p.b)}",
                        f"{number(p.spread_diff, '+.2f')} {interval(p.spread_diff_lo, p.spread_diff_hi)}",
                        seeds_needed_cell(p),
                    ]
                    for p in unresolved
                ],
            ),
        ]
    lines += [
        "",
        f"[Compare the cells (prepared view)]({view_url('', experiment_id, key)}) · "
        f"[its chart of accuracy against sigma]({view_url('', experiment_id, key, charts=True)})",
        "",
        "Report: "
        + "".join(
            f"[{file}]({artifact_url('', experiment_id, parent_run_id, 'report/' + file)}) · "
            for file in figure_files(registry)
        )
        + f"[report.md]({artifact_url('', experiment_id, parent_run_id, 'report/report.md')})",
    ]
    return "\n".join(lines) + "\n"
