"""``initmem report``: rebuild a sweep's table and plots from the tracking store alone."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from initmem_core.errors import ConfigError
from initmem_core.tracking.uris import resolve_tracking_uri

from .errors import UsageError, user_errors
from .options import DEFAULT_EXPERIMENT, Experiment, TrackingUri
from .tables import fitted_tables, one_table, output_console
from .ui import DEFAULT_UI, sweep_urls


class ReportFormat(StrEnum):
    table = "table"
    markdown = "markdown"
    csv = "csv"
    json = "json"


def rich_tables(report, name: str, width: int) -> list[Table]:
    """The full table, one section per group (its label in the title), each
    split into as many tables as ``width`` needs, sigma repeated in each: nothing is cut."""
    from initmem_core.report.render import (  # lazy: keeps the report code out of the CLI's start-up
        TABLE_COLUMNS,
        formatted,
        spread_cell,
        table_rows,
    )

    keys = [c for c, _, _ in TABLE_COLUMNS if c != "label"]
    headers = [h for c, h, _ in TABLE_COLUMNS if c != "label"]
    rows = table_rows(report)
    summaries = {g.group: g for g in report.groups}
    tables = []
    for group in dict.fromkeys(row["group"] for row in rows):
        cells = [[formatted(key, row[key]) for key in keys] for row in rows if row["group"] == group]
        title = f"sweep {name}, group {report.label(group)}"
        if group in summaries and (why := spread_cell(summaries[group])).startswith(("did not", "no run")):
            title += f": {why}"  # said once, rather than a dash in its spread column
        tables += fitted_tables(title, headers, cells, width, right=tuple(range(len(keys))))
    if report.pairs:  # a − b: debiased spreads over the sigmas both measured (see report.inference)
        from initmem_core.report.render import (  # lazy: keeps the report code out of the CLI's start-up
            PAIR_HEADERS,
            pair_cells,
        )

        # One table per pair, the two labels in its title: side by side they leave no room for numbers.
        for p in report.pairs:
            title = f"sweep {name}, paired difference (95% CI): {report.label(p.a)} − {report.label(p.b)}"
            tables += fitted_tables(title, PAIR_HEADERS, [pair_cells(p)], width, keys=0, right=(0, 1, 4, 5, 6, 7))
    if report.findings:
        from initmem_core.report.render import (  # lazy: keeps the report code out of the CLI's start-up
            findings_rows,
        )

        headers, cells = findings_rows(report.findings)
        # One table, however narrow the terminal: a claim never sits apart from its verdict.
        tables.append(one_table(f"sweep {name}, claims on this sweep", headers, cells, width))
    return tables


def _report_single_run(run_id: str, tracking_uri: str | None, format: str) -> bool:
    """The summary and per-epoch curves of run ``run_id`` if it is a single run; False if not."""
    from . import run_report  # lazy: it reads the store (MLflow), needed only for a run id

    run = run_report.load_single_run(run_id, tracking_uri)
    if run is None:
        return False
    if format == "table":
        output_console().print(*run_report.rich_tables(run))
    else:
        typer.echo(run_report.as_text(run, format), nl=False)
    return True


@user_errors
def report_command(
    ctx: typer.Context,
    sweep: Annotated[
        str | None,
        typer.Argument(help="Sweep name or parent run id, or the run id of one run (or --from FILE)"),
    ] = None,
    format: Annotated[ReportFormat, typer.Option("--format", "-f", help="Output format")] = ReportFormat.table,
    out: Annotated[
        Path | None, typer.Option(help="Folder for the table and plots (default: initmem-output/<name>)")
    ] = None,
    experiment: Experiment = DEFAULT_EXPERIMENT,
    tracking_uri: TrackingUri = None,
    from_file: Annotated[
        Path | None,
        typer.Option("--from", help="Read the sweep from an `initmem export` file instead of a tracking store"),
    ] = None,
) -> None:
    """Print a sweep's report (spread per group, per-sigma figures) and save its plots; for one run, its
    summary and per-epoch curves."""
    from initmem_core.report.assessment import (  # lazy: keeps the report code out of the CLI's start-up
        build_assessed_report,
    )
    from initmem_core.report.files import write_report_files  # lazy: keeps the report code out of the CLI's start-up
    from initmem_core.report.render import (  # lazy: keeps the report code out of the CLI's start-up
        to_csv,
        to_json,
        to_markdown,
    )
    from initmem_core.sweep.grid import DEFAULT_OUTPUT  # lazy: keeps sweep.grid out of the CLI's start-up
    from initmem_core.tracking.records import (  # lazy: keeps tracking.records out of the CLI's start-up
        load_sweep_records,
    )

    if sweep is None and from_file is None:
        raise UsageError(
            "give a sweep name or parent run id (read from the tracking store), a run id (one run's "
            "summary and curves) or --from FILE (an export); `initmem ui` lists what the store holds",
            ctx,
        )
    if sweep is not None and from_file is not None:
        raise UsageError("give a sweep name (read from the tracking store) or --from FILE (an export), not both", ctx)
    if from_file is not None:
        from initmem_core.tracking.export import read_export  # lazy: keeps tracking.export out of the CLI's start-up

        exported = read_export(from_file)
        name, records = exported.name, exported.records
    else:
        assert sweep is not None
        try:
            name, records = load_sweep_records(sweep, tracking_uri, experiment)
        except ConfigError:
            if not _report_single_run(sweep, tracking_uri, format.value):  # a run id, of a run that is no sweep
                raise
            return
    if not records:
        raise ConfigError(f"sweep '{name}' has no cells yet; launch it with `initmem sweep --name {name} ...`")
    report = build_assessed_report(records)  # the claims evaluated with it (report/assessment.py)
    title = f"Initialization memory: sweep {name}"
    files = write_report_files(report, out or DEFAULT_OUTPUT / name, title=title, records=records)
    # Machine-readable formats own stdout; where the files went is said on stderr.
    text = {
        "markdown": lambda: to_markdown(report, f"Initialization memory: sweep {name}"),
        "csv": lambda: to_csv(report),
        "json": lambda: to_json(report),
    }
    if format.value in text:
        typer.echo(text[format.value](), nl=False)
    else:
        console = output_console()
        console.print(*rich_tables(report, name, console.width))
    errors = Console(stderr=True, soft_wrap=True)  # a URL must not be cut or broken across lines
    errors.print(f"table and plots written to {files[0].parent}")
    if from_file is not None:
        return
    uri = resolve_tracking_uri(tracking_uri)
    server = uri.startswith(("http://", "https://"))
    what, url = sweep_urls(uri, uri if server else DEFAULT_UI, experiment, name)[-1]
    errors.print(
        f"{what} in the MLflow UI: {url}" + ("" if server else "  (serve it with `initmem ui`)"),
        markup=False,
        highlight=False,
    )
