"""``initmem sync``: upload what runs could not write to an unreachable or locked tracking store, through
``uploads``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from initmem_cli.options import TrackingUri
from initmem_cli.script_output import JSON_HELP, ScriptOutput
from initmem_plugins.commands.uploads import sync_folder


def sync_command(
    tracking_uri: TrackingUri = None,
    folder: Annotated[
        Path | None,
        typer.Option(
            help=(
                "Folder of unsynced files (default: initmem-unsynced beside the "
                "SQLite database, else in the current folder)"
            )
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Upload the metrics, tags and artifacts runs left in initmem-unsynced/, then delete them.

    Safe to repeat: a metric step the store already holds is not written again.
    """
    output = ScriptOutput(as_json)
    with output.redirected():
        result = sync_folder(tracking_uri, folder)
    for path in result.other_stores:
        output.echo(f"left {path}: it is for another tracking store (see its first line)")
    for path, reason in result.left.items():
        typer.secho(f"Error: left {path}: {reason}", fg=typer.colors.RED, err=True)
    if not result.uploaded:
        output.echo(
            "nothing to sync" if not result.other_stores and not result.left else "nothing to sync for this store"
        )
    else:
        output.echo(
            f"synced {len(result.uploaded)} run(s), {result.metrics} metric value(s): {', '.join(result.uploaded)}"
        )
    output.emit(
        {
            "synced_runs": result.uploaded,
            "metric_values": result.metrics,
            "other_stores": [str(path) for path in result.other_stores],
            "left": {str(path): reason for path, reason in result.left.items()},
        }
    )
    if result.left:
        raise typer.Exit(1)
