"""``initmem clean``: remove what a finished sweep left on disk (checkpoints, leases, report output)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .errors import user_errors
from .options import DEFAULT_EXPERIMENT, Experiment, TrackingUri
from .script_output import JSON_HELP, ScriptOutput


@user_errors
def clean_command(
    sweep: Annotated[str, typer.Argument(help="Sweep name or parent run id")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be removed, and how much")] = False,
    out: Annotated[Path | None, typer.Option(help="The sweep's report folder, if not initmem-output/<name>")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    experiment: Experiment = DEFAULT_EXPERIMENT,
    tracking_uri: TrackingUri = None,
) -> None:
    """Remove a sweep's leftover checkpoints, cell leases and report output (the tracking store's runs stay)."""
    from initmem_core.sweep.clean import (  # lazy: keeps mlflow out of the CLI's start-up
        clean_sweep,
        human_size,
    )

    output = ScriptOutput(as_json)
    with output.redirected():
        name, leftovers = clean_sweep(sweep, tracking_uri, experiment, out, dry_run)
    verb = "would remove" if dry_run else "removed"
    for leftover in leftovers:
        output.echo(f"{verb} {leftover.what}: {leftover.path} ({human_size(leftover.size)})")
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
            "bytes": total,
        }
    )
