"""How a report reads: the one place that turns its numbers (``report/memory.py``,
``report/forgetting.py``, the claims' findings) into text: report.md, report.csv, the JSON,
forgetting.csv, and the cells the terminal tables and the parent run's description show. Every
value goes through the formatters at the top, so a missing one reads ``DASH`` everywhere.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, fields
from typing import Any

from initmem_core.report.forgetting import MEMORIES, UNITS, GroupForgetting, HalfLife
from initmem_core.report.memory import CHANCE_MARGIN_PP, GroupSummary, PairedDifference, Report
from initmem_core.report.verdicts import NOT_EVALUATED, Finding, Quantity
from initmem_core.vocabulary import CLOCK_SYMBOLS, CLOCKS, REPAIR_GAP, TAU_INTERP, WEIGHT_NORM, WEIGHT_NORM_RATIO

#: What a missing value (nan) reads as in every table and sentence.
DASH = "–"


def _missing(value: Any) -> bool:
    return (isinstance(value, float) and math.isnan(value)) or value == ""


# -- the formatters -------------------------------------------------------------------------


def number(value: Any, spec: str = "", unit: str = "") -> str:
    """``value`` formatted by ``spec`` (e.g. ``+.2f``) and followed by ``unit``; ``DASH`` when it is nan."""
    return DASH if _missing(value) else f"{format(value, spec)}{unit}"


def interval(low: float, high: float, spec: str = "+.2f", open_ends: bool = False) -> str:
    """``[low, high]``; ``DASH`` when an end is missing, or with ``open_ends`` that end alone."""
    if not open_ends and (math.isnan(low) or math.isnan(high)):
        return DASH
    return f"[{number(low, spec)}, {number(high, spec)}]"


def estimate(value: float, low: float, high: float, spec: str = ".3g") -> str:
    """``value [low, high]``, the value alone without an interval, an open end as ``DASH``."""
    if math.isnan(value):
        return DASH
    if math.isnan(low) and math.isnan(high):
        return format(value, spec)
    return f"{format(value, spec)} {interval(low, high, spec, open_ends=True)}"


def markdown_table(headers: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    headers = list(headers)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def csv_table(columns: Iterable[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """Rows as CSV under ``columns`` (a missing value is an empty cell)."""
    columns = list(columns)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if _missing(row[c]) else row[c] for c in columns])
    return out.getvalue()


# -- the report (report/memory.py) ----------------------------------------------------------

#: (column, header, format spec) of the full table, one row per (group, sigma): a group by its
#: label (the CSV and JSON rows keep its key, ``group``, beside it).
TABLE_COLUMNS = (
    ("label", "group", ""),
    ("sigma", "sigma", "g"),
    ("runs", "runs", ""),
    ("failed", "failed", ""),
    ("test_acc", "test acc %", ".2f"),
    ("test_acc_std", "± pp", ".2f"),
    ("test_acc_lo", "95% CI low", ".2f"),
    ("test_acc_hi", "95% CI high", ".2f"),
    ("spread", "spread pp", ".2f"),
    ("spread_lo", "spread CI low", ".2f"),
    ("spread_hi", "spread CI high", ".2f"),
    ("debiased_spread", "debiased pp", "+.2f"),
    ("debiased_spread_lo", "debiased CI low", "+.2f"),
    ("debiased_spread_hi", "debiased CI high", "+.2f"),
    (TAU_INTERP, TAU_INTERP, ".1f"),
    ("never_interp", "never interp", ""),
    ("fit", "runs fit", ""),
    ("untrained", "did not train", ""),
    (REPAIR_GAP, "repair gap pp", "+.2f"),
    (WEIGHT_NORM, "‖W‖_F", ".4g"),
    (WEIGHT_NORM_RATIO, "‖W‖/‖W0‖", ".4g"),
    *((clock, CLOCK_SYMBOLS[clock], ".4g") for clock in CLOCKS),
    ("stopped", "stopped", ""),
    ("at_edge", "at the edge", ""),
)


_FORMATS = {column: spec for column, _, spec in TABLE_COLUMNS}


def table_rows(report: Report) -> list[dict[str, Any]]:
    """The full table as plain rows: each (group, sigma) row carries its group's label and spread."""
    by_group = {g.group: g for g in report.groups}
    carried = ("label", "spread", "spread_lo", "spread_hi", *(f"debiased_spread{end}" for end in ("", "_lo", "_hi")))
    return [{**asdict(row), **{key: getattr(by_group[row.group], key) for key in carried}} for row in report.rows]


def formatted(column: str, value: Any) -> str:
    """A value of the full table's ``column`` as the table shows it."""
    return number(value, _FORMATS[column])


def to_csv(report: Report) -> str:
    return csv_table(("group", *(c for c, _, _ in TABLE_COLUMNS)), table_rows(report))


def spread_cell(g: GroupSummary) -> str:
    """The group's spread, or why it has none (it did not train; no run ended)."""
    if g.did_not_train:
        return f"did not train (best {g.best_acc:.1f}%)"
    if g.runs_ran == 0:
        return f"no run ended ({g.failed} failed)" if g.failed else "no run ended"
    carried = [s for s in (g.best_sigma, g.worst_sigma) if s in g.untrained_sigmas]
    rests = f" (rests on σ {', '.join(f'{s:g}' for s in carried)}, which did not train)" if carried else ""
    return number(g.spread, ".2f") + rests


def debiased_cell(g: GroupSummary) -> str:
    """The cross-fitted spread with its interval, or why there is none."""
    if math.isnan(g.debiased_spread):
        return f"{DASH} ({g.debiased_note})" if g.debiased_note else DASH
    if math.isnan(g.debiased_spread_lo):
        return f"{g.debiased_spread:+.2f} (no interval: {g.debiased_note})"
    return f"{g.debiased_spread:+.2f} {interval(g.debiased_spread_lo, g.debiased_spread_hi)}"


SPREADS_EXPLAINED = (
    "Spread: the paper's figure, max − min over sigma of the mean test accuracy at the best-validation "
    "checkpoint, in percentage points, with a 95% interval that resamples each sigma's trained runs. It is "
    "biased upward by noise (a group that remembers nothing still shows a spread); that interval is for this test "
    "set. Debiased: the cross-fitted spread (best and worst sigma chosen on the other runs, their gap measured on runs "
    "held out of that choice), with its 95% t interval for the population of examples (the test set's own sampling "
    "error included, from the runs' per-example records; for this test set only where a note says they are missing); "
    "it is near zero for a group that does not remember, and it is what groups are compared by "
    "(docs/STATISTICS.md). A group within {margin:g} points of chance did not train and has no spread. The spread "
    "runs from the best sigma to the worst; a sigma whose runs sat within {margin:g} points of chance, or of which "
    "none fit its training set where others did, is marked in the per-sigma table (did not train), and a spread "
    "that rests on one says so."
)


def seeds_needed_cell(p: PairedDifference) -> str:
    """Resolved (``DASH``), the seeds a paired difference needs, or why no count would do."""
    if p.seeds_needed is not None:
        return f"{p.seeds_needed} seeds"
    return p.seeds_needed_note or DASH


#: The columns of a paired difference (a − b), after its two groups' labels.
PAIR_HEADERS = [
    "spread diff pp",
    "95% CI",
    "interval for",
    "seeds to resolve",
    "sigmas",
    "acc diff pp",
    "95% CI",
    "pairs",
]


def pair_cells(p: PairedDifference) -> list[str]:
    """A paired difference's cells under ``PAIR_HEADERS``."""
    return [
        number(p.spread_diff, "+.2f"),
        interval(p.spread_diff_lo, p.spread_diff_hi) if not p.note else f"{DASH} ({p.note})",
        DASH if p.note else p.interval_for,
        seeds_needed_cell(p),
        str(p.shared_sigmas),
        number(p.acc_diff, "+.2f"),
        interval(p.acc_diff_lo, p.acc_diff_hi),
        str(p.pairs),
    ]


def to_markdown(report: Report, title: str = "Initialization memory") -> str:
    lines = [f"# {title}", "", SPREADS_EXPLAINED.format(margin=CHANCE_MARGIN_PP), ""]
    lines += markdown_table(
        [
            "group",
            "spread pp",
            "95% CI",
            "debiased pp [95% CI]",
            "best sigma",
            "worst sigma",
            "sigmas never interpolated",
            "runs fit",
            "failed cells",
            *(CLOCK_SYMBOLS[c] for c in CLOCKS),
        ],
        [
            [
                g.label,
                spread_cell(g),
                interval(g.spread_lo, g.spread_hi, ".2f"),
                debiased_cell(g),
                *(number(v, "g") for v in (g.best_sigma, g.worst_sigma)),
                str(g.never_interp_sigmas),
                f"{g.runs_fit}/{g.runs_ran}",
                str(g.failed),
                *(number(v, ".4g") for v in (g.clock_sgd, g.clock_l2, g.clock_adapt)),
            ]
            for g in report.groups
        ],
    )
    notes = [f"- `{g.label}`: {g.debiased_note}" for g in report.groups if g.debiased_note and not g.did_not_train]
    lines += ["", *notes] if notes else []
    lines += ["", f"Every group: {report.shared}."] if report.shared else []
    lines += findings_markdown(report.findings)
    if report.pairs:
        lines += [
            "",
            "## Paired differences (a − b)",
            "",
            "Debiased spread difference over the sigmas both groups measured, with its 95% t interval (for "
            "the population, or for this test set where the per-example records are missing) and, when it is not "
            "resolved, the seeds per sigma a new sweep needs to resolve it with 80% power if the true difference "
            "were the observed one; accuracy difference averaged over cells of equal sigma and seed, with its t "
            "interval over those pairs (this test set).",
            "",
        ]
        named = [(report.label(p.a), report.label(p.b), p) for p in report.pairs]
        lines += markdown_table(["a", "b", *PAIR_HEADERS], [[a, b, *pair_cells(p)] for a, b, p in named])
        scoped = [f"- `{a}` − `{b}`: {p.scope_note}" for a, b, p in named if p.scope_note]
        if scoped:
            lines += ["", *scoped]
    lines += ["", "## Per sigma", ""]
    lines += markdown_table(
        [h for _, h, _ in TABLE_COLUMNS],
        [[formatted(c, row[c]) for c, _, _ in TABLE_COLUMNS] for row in table_rows(report)],
    )
    lines += forgetting_markdown(report.forgetting, report.label)
    if report.failures:
        lines += ["", "## Failed cells", ""]
        lines += markdown_table(
            ["group", "sigma", "seed", "status", "error", "run id"],
            [
                [
                    report.label(f.group),
                    f"{f.sigma:g}",
                    str(f.seed),
                    f.status,
                    f.error.replace("|", "\\|").replace("\n", " "),
                    f.run_id,
                ]
                for f in report.failures
            ],
        )
    return "\n".join(lines) + "\n"


def to_json(report: Report) -> str:
    def clean(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):  # a missing number; an empty text stays text
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    data = {
        "group_fields": report.group_fields,
        "shared": report.shared,
        "groups": [asdict(g) for g in report.groups],
        "rows": table_rows(report),
        "pairs": [asdict(p) for p in report.pairs],
        "failures": [asdict(f) for f in report.failures],
        "forgetting": {group: asdict(found) for group, found in report.forgetting.items()},
        "findings": [finding_data(f) for f in report.findings],
    }
    return json.dumps(clean(data), indent=2)


# -- the claims (report/claims.py, report/assessment.py) ------------------------------------

CLAIMS_EXPLAINED = (
    "Each registered claim that this sweep's groups let it evaluate (after its name, the plugin that registered it), "
    "comparing only groups that differ in nothing but the claim's own axis (a stratum each, when the "
    "sweep varies more). Every number a claim decides on is claimed above zero; the key is the one whose 95% "
    "interval is least clear of zero. Reproduced: every interval above zero; contradicted: one below zero at the "
    "Bonferroni level; not resolved at this scale otherwise; cannot be decided with too few seeds. Before any of "
    "these, the regime: under-trained where a compared run's selected predictor did not fit its training set "
    "(memory is read only among runs that fit), not converged where, at some sigma of a compared group, most runs "
    "were selected at the horizon's edge (still improving when training ended: memory is read only where every "
    "sigma converged), horizon short of the mechanism where a forgetting mechanism's clock is short of its "
    "threshold (no contradiction there). The margin is the one the claim was fixed with before any run."
)


def quantity_cell(q: Quantity | None, spec: str = "+.2f") -> str:
    """A claim's quantity as ``label: estimate unit [lo, hi]``, or why it has no interval."""
    if q is None:
        return DASH
    unit = f" {q.unit}" if q.unit else ""
    shown = interval(q.lo, q.hi, spec) if q.decided else f"(no interval: {q.reason or 'not measured'})"
    return f"{q.label}: {number(q.estimate, spec)}{unit} {shown}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or DASH


FINDINGS_HEADERS = ["claim", "verdict", "key quantity [95% CI]", "interval for", "margin"]


def findings_rows(findings: list[Finding], markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """The evaluated claims as rows under ``FINDINGS_HEADERS``, each followed by its strata's;
    ``markdown``: cells escaped, the claim's name as code."""
    cell = _cell if markdown else (lambda text: text or DASH)
    rows = []
    for f in (f for f in findings if f.verdict != NOT_EVALUATED):
        name = f"`{f.name}` ({f.plugin})" if markdown else f"{f.name} ({f.plugin})"
        for finding, label in [(f, f"{name}: {cell(f.claim)}"), *((p, f"↳ [{cell(p.stratum)}]") for p in f.parts)]:
            key = finding.key
            interval_for = key.interval_for if key else DASH
            rows.append(
                [label, cell(finding.verdict_text), cell(quantity_cell(key)), interval_for, cell(finding.margin)]
            )
    return FINDINGS_HEADERS, rows


def findings_markdown(findings: list[Finding]) -> list[str]:
    """The report's section on the claims (none when they were not evaluated), then what each
    claim left out would need."""
    if not findings:
        return []
    headers, rows = findings_rows(findings, markdown=True)
    lines = ["", "## Claims on this sweep", "", CLAIMS_EXPLAINED, ""]
    lines += markdown_table(headers, rows) if rows else ["No claim could be evaluated on this sweep's groups."]
    left = [f for f in findings if f.verdict == NOT_EVALUATED]
    if left:
        lines += ["", "Not evaluated on this sweep, and the groups each would need (or why it failed):", ""]
        lines += [f"- `{f.name}` ({f.claim}): {f.left_out}" for f in left]
    return lines


def quantity_data(q: Quantity | None) -> dict[str, Any] | None:
    return None if q is None else {f.name: getattr(q, f.name) for f in fields(q) if f.name != "at"}


def finding_data(f: Finding) -> dict[str, Any]:
    return {
        "name": f.name,
        "claim": f.claim,
        "verdict": f.verdict,
        "verdict_text": f.verdict_text,
        "regime": f.regime,
        "measured": f.measured,
        "key": quantity_data(f.key),
        "margin": f.margin,
        "stratum": f.stratum,
        "needs": f.needs,
        "plugin": f.plugin,
        "error": f.error,
        "quantities": [quantity_data(q) for q in f.quantities],
        "notes": [quantity_data(q) for q in f.notes],
        "parts": [finding_data(part) for part in f.parts],
    }


# -- forgetting times (report/forgetting.py) ------------------------------------------------


def half_life_text(half: HalfLife, unit: str = "epoch") -> str:
    """A half-life in ``unit`` with its interval; without one, the last epoch and the clocks a memory
    that did not fall to half reached."""
    if half.reached:
        return estimate(*half.value(unit))
    if not (half.never or "horizon" in half.note):
        return DASH
    clocks = ", ".join(
        f"{CLOCK_SYMBOLS[c]} {getattr(half, f'horizon_{c}'):.3g}"
        for c in CLOCKS
        if not math.isnan(getattr(half, f"horizon_{c}"))
    )
    return f"not within the horizon (epoch {half.horizon_epoch}{': ' + clocks if clocks else ''})"


FORGETTING_EXPLAINED = (
    "Half-life: the first time a memory falls to half its initial value (radial and directional memory: its "
    "value at epoch 0; accuracy memory, the debiased spread: its peak, as the spread forms while the nets "
    "learn), counted from epoch 0 and interpolated linearly "
    "between the two evaluation epochs that bracket it, each clock read at the same point. Radial: slope of "
    "log ‖W‖ on log σ (1 = the norm still carries the initial scale); directional: mean cos(W, W0). Radial and "
    "directional half-lives are the geometric mean over seeds with a 95% t interval in log units; accuracy's "
    "interval is where the spread's 95% band crosses the same line. A clock that never moved reads –."
)


def forgetting_markdown(forgetting: Mapping[str, GroupForgetting], label: Callable[[str], str] = str) -> list[str]:
    """The report's "Forgetting times" section (no lines when no record had histories), each group
    by its ``label``."""
    if not forgetting:
        return []
    header = [
        "group",
        "memory",
        "initial",
        "half-life epochs [95% CI]",
        *(f"{CLOCK_SYMBOLS[c]} [95% CI]" for c in CLOCKS),
        "seeds",
        "note",
    ]
    rows = []
    for group, found in forgetting.items():
        for memory in MEMORIES:
            half = found.half_lives.get(memory)
            if half is None:
                continue
            initial = number(half.initial, ".3g", f" (epoch {half.reference_epoch})")
            if half.reached:
                cells = [half_life_text(half, unit) for unit in UNITS]
            else:
                cells = [half_life_text(half), "", "", ""]
            seeds = f"{half.seeds}" + (f" ({half.never} never)" if half.never else "")
            note = "" if half.note == "not within the horizon" else half.note.replace("|", "\\|")
            rows.append([label(group), memory, initial, *cells, seeds, note])
    return ["", "## Forgetting times", "", FORGETTING_EXPLAINED, "", *markdown_table(header, rows)]


#: Columns of forgetting.csv, one row per (group, memory).
FORGETTING_COLUMNS = (
    "group",
    "memory",
    "reached",
    "initial",
    "reference_epoch",
    *(f"{unit}{end}" for unit in UNITS for end in ("", "_lo", "_hi")),
    "seeds",
    "never",
    "horizon_epoch",
    *(f"horizon_{c}" for c in CLOCKS),
    "note",
)


def forgetting_csv(forgetting: Mapping[str, GroupForgetting]) -> str:
    """Every half-life as CSV, one row per group and memory (empty cells: no value)."""
    return csv_table(
        FORGETTING_COLUMNS,
        (
            {"group": group, **asdict(found.half_lives[memory])}
            for group, found in forgetting.items()
            for memory in MEMORIES
            if memory in found.half_lives
        ),
    )
