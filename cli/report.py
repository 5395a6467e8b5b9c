"""``initmem report``: rebuild a sweep's table and plots from the tracking store alone."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from .errors import user_errors
from .options import DEFAULT_EXPERIMENT, Experiment, TrackingUri


class ReportFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    csv = "csv"
    json = "json"


def rich_tables(report, name: str) -> list[Table]:
    """The full table in two halves that fit a terminal: the selected predictor, then weights and clocks."""
    from initmem_core.report.memory import TABLE_COLUMNS, formatted, table_rows

    columns = [c for c, _, _ in TABLE_COLUMNS]
    split = columns.index("weight_norm")
    halves = {f"initialization memory: sweep {name}": columns[:split],
              "final weights and forgetting clocks": ["group", "sigma", *columns[split:]]}
    headers = {c: h for c, h, _ in TABLE_COLUMNS}
    rows = table_rows(report)
    tables = []
    for title, keys in halves.items():
        table = Table(title=title)
        for key in keys:
            table.add_column(headers[key], justify="left" if key == "group" else "right", no_wrap=key == "group")
        for row in rows:
            table.add_row(*(formatted(key, row[key]) for key in keys))
        tables.append(table)
    return tables


@user_errors
def report_command(
    sweep: Annotated[str, typer.Argument(help="Sweep name or parent run id")],
    format: Annotated[ReportFormat, typer.Option("--format", "-f", help="Output format")] = ReportFormat.table,
    out: Annotated[Optional[Path], typer.Option(help="Folder for the table and plots (default: initmem-output/<name>)")] = None,
    experiment: Experiment = DEFAULT_EXPERIMENT,
    tracking_uri: TrackingUri = None,
) -> None:
    """Print a sweep's report (spread per group, per-sigma figures) and save its plots."""
    from initmem_core.errors import ConfigError
    from initmem_core.tracking.records import load_sweep_records
    from initmem_core.report.memory import build_report, to_csv, to_json, to_markdown
    from initmem_core.report.files import write_report_files
    from initmem_core.sweep.grid import DEFAULT_OUTPUT

    name, records = load_sweep_records(sweep, tracking_uri, experiment)
    if not records:
        raise ConfigError(f"sweep '{name}' has no cells yet; launch it with `initmem sweep --name {name} ...`")
    report = build_report(records)
    files = write_report_files(report, out or DEFAULT_OUTPUT / name, title=f"Initialization memory: sweep {name}")
    # Machine-readable formats own stdout; where the files went is said on stderr.
    text = {"markdown": lambda: to_markdown(report, f"Initialization memory: sweep {name}"),
            "csv": lambda: to_csv(report), "json": lambda: to_json(report)}
    if format.value in text:
        typer.echo(text[format.value](), nl=False)
    else:
        Console().print(*rich_tables(report, name))
    Console(stderr=True).print(f"table and plots written to {files[0].parent}")
