"""The initialization-memory report: per group, how much the selected predictor depends on sigma.

Pure: ``build_report(records)`` reads nothing and writes nothing, so it can be checked against a
hand computation. Accuracies arrive as fractions and leave in percent; the spread is in
percentage points (the paper's unit).

A group is every cell that differs only in sigma and seed (``grid.group_fields``). Per group and
sigma: test accuracy at the best-validation checkpoint (mean and std over seeds), tau_interp and
how many seeds never interpolated, the repair gap, the final ||W||_F and ||W||/||W0||, and the
forgetting clocks at the end. Cells that failed or diverged count as failures to train and are
left out of every mean.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from initmem_core.sweep.grid import group_fields, group_keys, metric_suffix
from initmem_core.tracking.records import CellRecord

NAN = float("nan")
CLOCKS = ("clock_sgd", "clock_l2", "clock_adapt")


@dataclass
class SigmaRow:
    group: str
    sigma: float
    runs: int
    failed: int
    test_acc: float  # % mean over seeds, at the best-validation checkpoint
    test_acc_std: float  # pp, sample std over seeds (nan with one seed)
    tau_interp: float  # mean epoch over the seeds that interpolated
    never_interp: int  # trained seeds that never reached the threshold
    repair_gap: float  # pp
    weight_norm: float
    weight_norm_ratio: float
    clock_sgd: float
    clock_l2: float
    clock_adapt: float


@dataclass
class GroupSummary:
    group: str
    spread: float  # pp: max - min over sigma of the mean test accuracy
    best_sigma: float
    worst_sigma: float
    sigmas: int
    never_interp_sigmas: int  # sigmas at which no trained seed interpolated
    failed: int
    clock_sgd: float
    clock_l2: float
    clock_adapt: float


@dataclass
class Failure:
    group: str
    sigma: float
    seed: int
    status: str
    error: str
    run_id: str


@dataclass
class Report:
    groups: list[GroupSummary]
    rows: list[SigmaRow]
    failures: list[Failure]
    group_fields: list[str]
    #: group -> [(sigma, seed, [(epoch, ||W||_F)])] of every trained cell, for the norm plot
    norm_curves: dict[str, list[tuple[float, int, list[tuple[int, float]]]]] = field(default_factory=dict)

    def parent_metrics(self) -> dict[str, float]:
        """Per-group figures as metric names the MLflow UI can chart, e.g. ``spread_opt-sgd``."""
        metrics = {}
        for g in self.groups:
            suffix = metric_suffix(g.group)
            figures = {"spread": g.spread, "never_interp_sigmas": g.never_interp_sigmas,
                       "failed_cells": g.failed, **{c: getattr(g, c) for c in CLOCKS}}
            metrics.update({f"{name}_{suffix}": float(value) for name, value in figures.items()
                            if not math.isnan(value)})
        return metrics


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else NAN


def _std(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else NAN


def _sigma_row(group: str, sigma: float, cells: list[CellRecord]) -> SigmaRow:
    trained = [c for c in cells if c.trained]
    acc = [100 * c.metrics["best_val_test_acc"] for c in trained if "best_val_test_acc" in c.metrics]
    interpolated = [c for c in trained if "tau_interp" in c.metrics]

    def mean_of(key: str, among: list[CellRecord] = trained, scale: float = 1.0) -> float:
        return _mean([scale * c.metrics[key] for c in among if key in c.metrics])

    return SigmaRow(
        group=group, sigma=sigma, runs=len(cells), failed=len(cells) - len(trained),
        test_acc=_mean(acc), test_acc_std=_std(acc),
        tau_interp=mean_of("tau_interp", interpolated), never_interp=len(trained) - len(interpolated),
        repair_gap=mean_of("repair_gap", interpolated, 100.0),
        weight_norm=mean_of("weight_norm"), weight_norm_ratio=mean_of("weight_norm_ratio"),
        **{clock: mean_of(clock) for clock in CLOCKS},
    )


def _summary(group: str, rows: list[SigmaRow], cells: list[CellRecord]) -> GroupSummary:
    measured = [r for r in rows if not math.isnan(r.test_acc)]
    best = max(measured, key=lambda r: r.test_acc, default=None)
    worst = min(measured, key=lambda r: r.test_acc, default=None)
    trained = [c for c in cells if c.trained]
    return GroupSummary(
        group=group,
        spread=best.test_acc - worst.test_acc if best else NAN,
        best_sigma=best.sigma if best else NAN,
        worst_sigma=worst.sigma if worst else NAN,
        sigmas=len(rows),
        never_interp_sigmas=sum(1 for r in rows if r.runs > r.failed and r.never_interp == r.runs - r.failed),
        failed=sum(r.failed for r in rows),
        **{clock: _mean([c.metrics[clock] for c in trained if clock in c.metrics]) for clock in CLOCKS},
    )


def build_report(records: Iterable[CellRecord]) -> Report:
    records = list(records)
    fields = group_fields(r.config for r in records)
    by_group: dict[str, list[CellRecord]] = {}
    for record, key in zip(records, group_keys(r.config for r in records)):
        by_group.setdefault(key, []).append(record)
    groups, rows, failures, curves = [], [], [], {}
    for group in sorted(by_group):
        cells = by_group[group]
        sigmas = sorted({c.config.sigma for c in cells})
        group_rows = [_sigma_row(group, s, [c for c in cells if c.config.sigma == s]) for s in sigmas]
        rows.extend(group_rows)
        groups.append(_summary(group, group_rows, cells))
        curves[group] = [(c.config.sigma, c.config.seed, c.weight_norms)
                         for c in sorted(cells, key=lambda c: (c.config.sigma, c.config.seed))
                         if c.trained and c.weight_norms]
        failures.extend(
            Failure(group, c.config.sigma, c.config.seed, "DIVERGED" if c.diverged else c.status,
                    c.error, c.run_id)
            for c in cells if not c.trained)
    return Report(groups, rows, failures, fields, curves)


# -- output formats -------------------------------------------------------------------------

#: (column, header, format) of the full table, one row per (group, sigma).
TABLE_COLUMNS = (
    ("group", "group", "{}"), ("sigma", "sigma", "{:g}"), ("runs", "runs", "{}"), ("failed", "failed", "{}"),
    ("test_acc", "test acc %", "{:.2f}"), ("test_acc_std", "± pp", "{:.2f}"),
    ("spread", "spread pp", "{:.2f}"), ("tau_interp", "tau_interp", "{:.1f}"),
    ("never_interp", "never interp", "{}"), ("repair_gap", "repair gap pp", "{:+.2f}"),
    ("weight_norm", "‖W‖_F", "{:.4g}"), ("weight_norm_ratio", "‖W‖/‖W0‖", "{:.4g}"),
    ("clock_sgd", "T_SGD", "{:.4g}"), ("clock_l2", "T_L2", "{:.4g}"), ("clock_adapt", "T_adapt", "{:.4g}"),
)


_FORMATS = {column: fmt for column, _, fmt in TABLE_COLUMNS}


def table_rows(report: Report) -> list[dict[str, Any]]:
    """The full table as plain rows: each (group, sigma) row carries its group's spread."""
    spread = {g.group: g.spread for g in report.groups}
    return [{**asdict(row), "spread": spread[row.group]} for row in report.rows]


def formatted(column: str, value: Any) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "–"
    return _FORMATS[column].format(value)


def to_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([c for c, _, _ in TABLE_COLUMNS])
    for row in table_rows(report):
        writer.writerow(["" if isinstance(v, float) and math.isnan(v) else v
                         for v in (row[c] for c, _, _ in TABLE_COLUMNS)])
    return out.getvalue()


def _markdown_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def to_markdown(report: Report, title: str = "Initialization memory") -> str:
    lines = [f"# {title}", "", "Spread: max − min over sigma of the mean test accuracy at the "
             "best-validation checkpoint, in percentage points.", ""]
    lines += _markdown_table(
        ["group", "spread pp", "best sigma", "worst sigma", "sigmas never interpolated", "failed cells",
         "T_SGD", "T_L2", "T_adapt"],
        [[g.group, *(("–" if math.isnan(v) else f"{v:{f}}") for v, f in (
            (g.spread, ".2f"), (g.best_sigma, "g"), (g.worst_sigma, "g"))),
          str(g.never_interp_sigmas), str(g.failed),
          *(("–" if math.isnan(v) else f"{v:.4g}") for v in (g.clock_sgd, g.clock_l2, g.clock_adapt))]
         for g in report.groups])
    lines += ["", "## Per sigma", ""]
    lines += _markdown_table([h for _, h, _ in TABLE_COLUMNS],
                             [[formatted(c, row[c]) for c, _, _ in TABLE_COLUMNS] for row in table_rows(report)])
    if report.failures:
        lines += ["", "## Failed cells", ""]
        lines += _markdown_table(["group", "sigma", "seed", "status", "error", "run id"],
                                 [[f.group, f"{f.sigma:g}", str(f.seed), f.status,
                                   f.error.replace("|", "\\|").replace("\n", " "), f.run_id]
                                  for f in report.failures])
    return "\n".join(lines) + "\n"


def to_json(report: Report) -> str:
    def clean(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    data = {"group_fields": report.group_fields, "groups": [asdict(g) for g in report.groups],
            "rows": table_rows(report), "failures": [asdict(f) for f in report.failures]}
    return json.dumps(clean(data), indent=2)
