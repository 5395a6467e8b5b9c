"""``initmem report RUN_ID`` for one run that is not a sweep: read back from the store, its summary
and per-epoch curves.

>>> run = load_single_run("3f2a...", "sqlite:///mlflow.db")
>>> run.summary["best_val_test_acc"], run.epochs[-1]["test_acc"]
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from initmem_core.tracking.client import open_client
from initmem_core.tracking.records import looks_like_run_id, metric_history
from initmem_core.vocabulary import (
    CLOCK_SYMBOLS,
    FIT,
    PARENT_ROLE,
    PER_EPOCH_METRICS,
    REPAIR_GAP,
    ROLE_TAG,
    SELECTION_METRICS,
    TAU_INTERP,
    TEST_ACC,
    TRAIN_ACC,
    TRAIN_LOSS,
    VAL_ACC,
    VAL_LOSS,
    WEIGHT_NORM_RATIO,
)

#: The per-epoch columns shown: (metric, header).
CURVE_COLUMNS = (
    (TRAIN_LOSS, "train loss"),
    (TRAIN_ACC, "train acc"),
    (VAL_LOSS, "val loss"),
    (VAL_ACC, "val acc"),
    (TEST_ACC, "test acc"),
    (WEIGHT_NORM_RATIO, "||W||/||W0||"),
    *CLOCK_SYMBOLS.items(),
)
#: The params worth a line in the summary, when the run has them.
SHOWN_PARAMS = ("arch", "opt", "lr", "sigma", "seed", "epochs", "batch_size", "data", "train_size", "eval_size")
#: A run's summary figures, in the order a report shows them.
SUMMARY_METRICS = (*SELECTION_METRICS, TAU_INTERP, REPAIR_GAP, FIT)


@dataclass(frozen=True)
class SingleRun:
    run_id: str
    run_name: str
    status: str
    params: dict[str, str]
    summary: dict[str, float]
    #: one row per logged epoch: ``{"epoch": 0, "train_loss": ..., "clock_sgd": ..., ...}``
    epochs: list[dict[str, Any]] = field(default_factory=list)


def load_single_run(run_id: str, tracking_uri: str | None = None) -> SingleRun | None:
    """The run ``run_id`` with its summary and per-epoch figures; ``None`` when the store has no
    such run or it is a sweep's parent (a sweep, reported as one). Creates no store."""
    if not looks_like_run_id(run_id):
        return None
    client = open_client(tracking_uri, create=False)
    try:
        run = client.get_run(run_id)
    except Exception:  # MLflow raises its own error for an unknown id
        return None
    if run.data.tags.get(ROLE_TAG) == PARENT_ROLE:
        return None
    metrics = run.data.metrics
    by_epoch: dict[int, dict[str, Any]] = {}
    for key in [key for key in PER_EPOCH_METRICS if key in metrics]:
        for step, value in metric_history(client, run_id, key):
            by_epoch.setdefault(step, {"epoch": step})[key] = value
    return SingleRun(
        run_id,
        run.info.run_name or "",
        run.info.status,
        dict(run.data.params),
        {key: metrics[key] for key in SUMMARY_METRICS if key in metrics},
        [by_epoch[epoch] for epoch in sorted(by_epoch)],
    )


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
