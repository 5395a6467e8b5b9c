"""``initmem report RUN_ID`` for one run that is not a sweep: its summary and per-epoch curves."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

from rich.table import Table

from initmem_core.vocabulary import (
    CLOCK_SYMBOLS,
    TEST_ACC,
    TRAIN_ACC,
    TRAIN_LOSS,
    VAL_ACC,
    VAL_LOSS,
)

#: The per-epoch columns shown: (metric, header).
CURVE_COLUMNS = (
    (TRAIN_LOSS, "train loss"),
    (TRAIN_ACC, "train acc"),
    (VAL_LOSS, "val loss"),
    (VAL_ACC, "val acc"),
    (TEST_ACC, "test acc"),
    ("weight_norm_ratio", "||W||/||W0||"),
    *CLOCK_SYMBOLS.items(),
)
#: The params worth a line in the summary, when the run has them.
SHOWN_PARAMS = ("arch", "opt", "lr", "sigma", "seed", "epochs", "batch_size", "data", "train_size", "eval_size")


def _number(value) -> str:
    return "–" if value is None else f"{value:.4g}"


def _title(run) -> str:
    return f"run {run.run_name} ({run.status})"


def summary_rows(run) -> list[tuple[str, str]]:
    rows = [("run id", run.run_id)]
    rows += [(key, run.params[key]) for key in SHOWN_PARAMS if key in run.params]
    rows += [(key, _number(value)) for key, value in run.summary.items()]
    return rows


def curve_rows(run) -> list[list[str]]:
    return [[str(row["epoch"]), *(_number(row.get(key)) for key, _ in CURVE_COLUMNS)] for row in run.epochs]


def rich_tables(run) -> list[Table]:
    summary = Table(title=_title(run))
    summary.add_column("figure", overflow="fold")
    summary.add_column("value", justify="right", overflow="fold")
    for key, value in summary_rows(run):
        summary.add_row(key, value)
    curves = Table(title="per epoch (from the tracking store)")
    for header in ("epoch", *(h for _, h in CURVE_COLUMNS)):
        curves.add_column(header, justify="right", overflow="fold")
    for row in curve_rows(run):
        curves.add_row(*row)
    return [summary, curves]


def markdown(run) -> str:
    lines = [f"# {_title(run)}", "", "| figure | value |", "| --- | ---: |"]
    lines += [f"| {key} | {value} |" for key, value in summary_rows(run)]
    headers = ["epoch", *(h for _, h in CURVE_COLUMNS)]
    lines += ["", "| " + " | ".join(headers) + " |", "|" + " ---: |" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in curve_rows(run)]
    return "\n".join(lines) + "\n"


def csv_text(run) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    keys = ["epoch", *(key for key, _ in CURVE_COLUMNS)]
    writer.writerow(keys)
    for row in run.epochs:
        writer.writerow([row.get(key, "") for key in keys])
    return buffer.getvalue()


def as_text(run, format: str) -> str:
    """``format``: markdown, csv or json (the table goes through ``rich_tables``)."""
    if format == "json":
        return json.dumps(dataclasses.asdict(run), indent=2) + "\n"
    return markdown(run) if format == "markdown" else csv_text(run)
