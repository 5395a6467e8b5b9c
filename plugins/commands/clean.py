"""``initmem clean``: remove what a sweep or single runs left on disk (checkpoints, leases; the
report output only with ``--reports``), through ``housekeeping``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from initmem_cli.errors import UsageError
from initmem_cli.options import DEFAULT_EXPERIMENT, Experiment, TrackingUri
from initmem_cli.script_output import JSON_HELP, ScriptOutput
from initmem_core.errors import ConfigError
from initmem_core.sweep.disk import human_size


def clean_command(
    ctx: typer.Context,
    names: Annotated[
        list[str] | None,
        typer.Argument(help="A sweep's name or parent run id, or single runs' ids or names", show_default=False),
    ] = None,
    reports: Annotated[
        bool, typer.Option("--reports", help="Also remove the sweep's report and plots (kept by default)")
    ] = False,
    runs: Annotated[
        bool, typer.Option("--runs", help="Clean the checkpoints of single runs (not a sweep's), all or --older-than")
    ] = False,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="With --runs: only checkpoints last written longer ago (30m, 12h, 7d, 2w)"),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be removed, and how much")] = False,
    out: Annotated[Path | None, typer.Option(help="The sweep's report folder, if not initmem-output/<name>")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    experiment: Experiment = DEFAULT_EXPERIMENT,
    tracking_uri: TrackingUri = None,
) -> None:
    """Remove a sweep's leftover checkpoints and cell leases (its report and plots with --reports), or
    the checkpoints of single runs by id, name or age (--runs --older-than 7d). The tracking store's
    runs stay."""
    from .housekeeping import clean_sweep, parse_age, remove, run_leftovers  # lazy: mlflow

    names = names or []
    age = parse_age(older_than) if older_than is not None else None
    if not names and not (runs or age is not None):
        raise UsageError(
            "give a sweep's name, single runs' ids or names, or --runs (every single run's checkpoints; "
            "--older-than 7d for the old ones)",
            ctx,
        )
    if names and (runs or age is not None):
        raise UsageError("give names or --runs/--older-than, not both", ctx)
    output = ScriptOutput(as_json)
    verb = "would remove" if dry_run else "removed"
    with output.redirected():
        if len(names) == 1:
            try:
                name, leftovers, kept = clean_sweep(names[0], tracking_uri, experiment, out, dry_run, reports)
            except ConfigError as not_a_sweep:
                if "no sweep" not in str(not_a_sweep):
                    raise
            else:
                _tell_sweep(output, name, leftovers, kept, verb, dry_run)
                return
        found = run_leftovers(tracking_uri, experiment, tuple(names), age)
        if not dry_run:
            remove([leftover for _, leftover in found])
    for run_name, leftover in found:
        output.echo(f"{verb} checkpoints of run {run_name}: {leftover.path} ({human_size(leftover.size)})")
    total = sum(leftover.size for _, leftover in found)
    scope = f" older than {older_than}" if age is not None else ""
    output.echo(
        f"single runs{scope}: {verb} {len(found)} checkpoint folder(s), {human_size(total)}"
        if found
        else f"single runs{scope}: no checkpoints to clean"
    )
    output.emit(
        {
            "runs": [run_name for run_name, _ in found],
            "dry_run": dry_run,
            "items": [{"what": item.what, "path": str(item.path), "bytes": item.size} for _, item in found],
            "bytes": total,
        }
    )


def _tell_sweep(output: ScriptOutput, name, leftovers, kept, verb: str, dry_run: bool) -> None:
    for leftover in leftovers:
        output.echo(f"{verb} {leftover.what}: {leftover.path} ({human_size(leftover.size)})")
    for leftover in kept:
        output.echo(f"kept {leftover.what}: {leftover.path} (--reports removes it)")
    total = sum(leftover.size for leftover in leftovers)
    output.echo(
        f"sweep {name}: {verb} {len(leftovers)} item(s), {human_size(total)}"
        if leftovers
        else f"sweep {name}: nothing left to clean"
    )
    output.emit(
        {
            "sweep": name,
            "dry_run": dry_run,
            "items": [{"what": item.what, "path": str(item.path), "bytes": item.size} for item in leftovers],
            "kept": [{"what": item.what, "path": str(item.path), "bytes": item.size} for item in kept],
            "bytes": total,
        }
    )
