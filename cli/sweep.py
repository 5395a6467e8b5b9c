"""``initmem sweep``: a grid of runs under one MLflow parent run, then the initialization-memory report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from .errors import fail, user_errors
from .options import with_config_options

SWEEP, TRACKING = "Sweep", "Tracking"


def dry_run_table(spec, cells) -> Table:
    from initmem_core.grid import group_keys

    varying = spec.varying
    table = Table(title="dry run: nothing is run")
    table.add_column("#", justify="right")
    for field in varying:
        table.add_column(field, justify="right")
    table.add_column("group")
    for index, (cell, key) in enumerate(zip(cells, group_keys(cells)), 1):
        table.add_row(str(index), *(str(getattr(cell, f)) for f in varying), key)
    return table


def groups_table(report) -> Table:
    from initmem_core.report import formatted

    table = Table(title="initialization memory per group")
    for header in ("group", "spread pp", "best σ", "worst σ", "σ never interpolated", "failed"):
        table.add_column(header, justify="left" if header == "group" else "right")
    for g in report.groups:
        table.add_row(g.group, formatted("spread", g.spread), formatted("sigma", g.best_sigma),
                      formatted("sigma", g.worst_sigma), str(g.never_interp_sigmas), str(g.failed))
    return table


def failures_table(failed) -> Table:
    table = Table(title="failed cells", title_style="red")
    for header in ("cell", "status", "run id", "error"):
        table.add_column(header, overflow="fold")
    for cell in failed:
        table.add_row(cell.label, cell.status, cell.run_id, cell.error)
    return table


@with_config_options(as_text=True)
@user_errors
def sweep_command(
    config_values: dict[str, Any],
    config: Annotated[Optional[Path], typer.Option("--config", help="TOML sweep file: name, \\[base] fixed values, \\[grid] lists or ranges; options given here override it", rich_help_panel=SWEEP)] = None,
    preset: Annotated[Optional[str], typer.Option(help="Start from one of the paper's presets (see `initmem presets`); --config and options override it", rich_help_panel=SWEEP)] = None,
    name: Annotated[Optional[str], typer.Option(help="Sweep name (default: generated from the grid, and printed); relaunching a name resumes that sweep", rich_help_panel=SWEEP)] = None,
    workers: Annotated[int, typer.Option(min=1, help="Cells run in parallel, each in its own process with an equal share of the CPU threads", rich_help_panel=SWEEP)] = 1,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the cells and the estimated work; run nothing", rich_help_panel=SWEEP)] = False,
    out: Annotated[Optional[Path], typer.Option(help="Folder for the report's table and plots (default: initmem-output/<name>)", rich_help_panel=SWEEP)] = None,
    experiment: Annotated[str, typer.Option(help="MLflow experiment", rich_help_panel=TRACKING)] = "initmem",
    tracking_uri: Annotated[Optional[str], typer.Option(help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)", rich_help_panel=TRACKING)] = None,
) -> None:
    """Run a grid of runs, e.g. `initmem sweep --sigma 0.1:2.5:7 --opt sgd,adam --workers 2`.

    Any run option takes a list (a,b,c) or, for numbers, a range start:stop:count.
    """
    from initmem_core.grid import SweepSpec, default_name, estimate_work, expand, group_keys, spec_from_toml, spec_from_values
    from initmem_core.plugins import get_registry
    from initmem_core.records import check_sweep_name

    from initmem_core.presets import preset_spec

    spec = preset_spec(preset) if preset else SweepSpec()
    if config:
        spec = spec.override(spec_from_toml(config)) if preset else spec_from_toml(config)
    spec = spec.override(spec_from_values(config_values))
    cells = expand(spec, get_registry())
    name = check_sweep_name(name or spec.name or default_name(spec))
    console = Console()
    console.print(f"sweep [bold]{name}[/bold]")
    if dry_run:
        console.print(dry_run_table(spec, cells))
        groups = len(set(group_keys(cells)))
        console.print(f"{len(cells)} cells in {groups} group(s); estimated work: {estimate_work(cells)}")
        return

    from initmem_core.sweep import run_sweep

    from .sweep_progress import SweepDisplay

    console.print(f"{len(cells)} cells, {workers} worker(s)")
    try:
        with SweepDisplay(console) as display:
            result = run_sweep(spec, name=name, workers=workers, tracking_uri=tracking_uri,
                               experiment=experiment, progress=display, out=out)
    except KeyboardInterrupt:
        raise fail(f"interrupted; launch `initmem sweep ... --name {name}` again to resume", 130)
    console.print(groups_table(result.report))
    skipped = sum(cell.skipped for cell in result.cells)
    console.print(f"{len(result.cells)} cells: {len(result.cells) - skipped - len(result.failed)} ran, "
                  f"{skipped} skipped (finished before), {len(result.failed)} failed")
    console.print(f"report and plots: {result.files[0].parent}   parent run: [bold]{result.parent_run_id}[/bold]"
                  f"   (`initmem report {name}`, `initmem ui`)")
    if result.failed:
        console.print(failures_table(result.failed))
        raise typer.Exit(1)
