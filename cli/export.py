"""``initmem export``: one sweep's records as one file, to rebuild its report with no store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from initmem_core.errors import ConfigError

from .errors import user_errors
from .options import DEFAULT_EXPERIMENT, Experiment, TrackingUri


@user_errors
def export_command(
    sweep: Annotated[str, typer.Argument(help="Sweep name or parent run id")],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="The file to write (gzip JSON; by convention docs/results/<name>.json.gz)"),
    ],
    experiment: Experiment = DEFAULT_EXPERIMENT,
    tracking_uri: TrackingUri = None,
) -> None:
    """Write a sweep's cells (configs, metrics, histories, per-example records) to one file that
    `initmem report --from FILE` reads with no tracking store and no MLflow."""
    from initmem_core.tracking.export import export_sweep, write_export  # lazy: keeps MLflow out of the CLI's start-up

    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder; give a file name, e.g. {out / 'SWEEP.json.gz'}")
    export = export_sweep(sweep, tracking_uri, experiment)
    if not export.records:
        raise ConfigError(f"sweep '{export.name}' has no ended cells yet; nothing to export")
    size = write_export(export, out)
    typer.echo(f"exported sweep {export.name}: {len(export.records)} cells, {size / 1e6:.2f} MB, to {out}")
