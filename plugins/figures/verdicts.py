"""``verdicts.png``: the claims on a sweep as a forest plot.

A row per evaluated claim (and below it one per stratum, when it was decided in more than one):
its key quantity's estimate and 95% interval against the zero line (every quantity is claimed above
zero, its margin already in it), the margin in the row's label and the verdict beside it. Each unit
(pp, shares, log units) gets a panel of its own."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

from initmem_core.report.memory import Report
from initmem_core.report.verdicts import (
    CANNOT_DECIDE,
    CONTRADICTED,
    HORIZON_SHORT,
    NOT_CONVERGED,
    NOT_EVALUATED,
    REPRODUCED,
    UNDER_TRAINED,
    Finding,
    Quantity,
)
from initmem_plugins.figures.canvas import new_figure, save_figure

#: The colour each verdict is written (and its row drawn) in.
VERDICT_COLOURS = {
    REPRODUCED: "tab:green",
    CONTRADICTED: "tab:red",
    CANNOT_DECIDE: "0.45",
    UNDER_TRAINED: "tab:brown",  # out of the regime: drawn, but never read as a verdict either way
    NOT_CONVERGED: "tab:pink",
    HORIZON_SHORT: "tab:purple",
}
OTHER_COLOUR = "tab:orange"  # not resolved at this scale
UNIT_TITLES = {"pp": "percentage points", "": "share / correlation (no unit)", "log": "log units"}


@dataclass(frozen=True)
class Row:
    """One row of the forest plot: ``gid`` (the claim's name, and its stratum for a part), label,
    quantity and verdict."""

    gid: str
    label: str
    quantity: Quantity
    verdict: str


#: Characters a line of a row's label holds: longer text goes on to the next line, never cut.
LABEL_WIDTH = 60


def _label(finding: Finding, quantity: Quantity, part: bool) -> str:
    head = f"  ↳ [{finding.stratum}]" if part else f"{finding.name} (plugin {finding.plugin})"
    lines = [head, *textwrap.wrap(quantity.label, LABEL_WIDTH)]
    if finding.margin and not part:
        lines += textwrap.wrap(f"margin: {finding.margin}", LABEL_WIDTH)
    return "\n".join(lines)


def forest_rows(findings: list[Finding]) -> list[Row]:
    """The rows the figure draws, top to bottom: every evaluated claim with a key quantity, then its parts."""
    rows = []
    for finding in findings:
        if finding.verdict == NOT_EVALUATED or finding.key is None:
            continue
        rows.append(Row(finding.name, _label(finding, finding.key, False), finding.key, finding.verdict))
        for part in finding.parts:
            if part.key is not None:
                rows.append(
                    Row(f"{finding.name} [{part.stratum}]", _label(part, part.key, True), part.key, part.verdict)
                )
    return rows


def _draw_row(ax, y: float, row: Row) -> None:
    q, colour = row.quantity, VERDICT_COLOURS.get(row.verdict, OTHER_COLOUR)
    if not math.isnan(q.estimate):
        if q.decided:
            bars = ax.errorbar(
                [q.estimate],
                [y],
                xerr=[[q.estimate - q.lo], [q.hi - q.estimate]],
                fmt="o",
                capsize=4,
                color=colour,
            )
            bars.lines[0].set_gid(row.gid)
        else:  # no interval (too few seeds): the estimate alone, hollow
            (point,) = ax.plot([q.estimate], [y], "o", mfc="none", color=colour)
            point.set_gid(row.gid)
    verdict = row.verdict if q.decided else f"{row.verdict} (no interval: {q.reason or 'not measured'})"
    ax.annotate(
        verdict,
        (1.0, y),
        xycoords=("axes fraction", "data"),
        xytext=(8, 0),
        textcoords="offset points",
        va="center",
        fontsize="small",
        color=colour,
        gid=row.gid,
    )


def verdict_plot(report: Report, path: Path) -> Path | None:
    """The forest plot of ``report.findings`` into ``path`` (a line saying so when none was
    evaluated); ``None`` when no claim was (none registered: the plugin ``claims`` left out)."""
    if not report.findings:
        return None
    rows = forest_rows(report.findings)
    units = list(dict.fromkeys(r.quantity.unit for r in rows))
    per_unit = {unit: [r for r in rows if r.quantity.unit == unit] for unit in units}
    lines = sum(r.label.count("\n") + 1 for r in rows)
    figure = new_figure(11.0, 1.4 + 0.24 * lines + 0.6 * len(units))
    if not rows:
        figure.text(
            0.5, 0.5, "no registered claim could be evaluated on this sweep", ha="center", va="center", color="0.35"
        )
        return save_figure(figure, path)
    axes = figure.subplots(len(units), 1, squeeze=False, height_ratios=[len(per_unit[u]) for u in units])[:, 0]
    for ax, unit in zip(axes, units):
        shown = per_unit[unit]
        for index, row in enumerate(shown):
            _draw_row(ax, -index, row)
        ax.axvline(0.0, color="black", linewidth=1.0)  # the decision threshold: claimed above zero
        ax.set_yticks([-i for i in range(len(shown))], [r.label for r in shown], fontsize="small")
        ax.set_ylim(-len(shown) + 0.5, 0.5)
        ax.set_xlabel(f"key quantity, claimed above zero ({UNIT_TITLES.get(unit, unit)}; bars: 95% CI)")
        ax.grid(axis="x", alpha=0.3)
    figure.suptitle("Claims on this sweep, each with its plugin: reproduced when the interval is right of zero")
    return save_figure(figure, path)
