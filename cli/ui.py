"""``initmem ui``: the MLflow UI on the same store the runs and sweeps write to."""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated

import typer

from .errors import fail, user_errors
from .options import TrackingUri


def ui_args(uri: str, host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]


@user_errors
def ui_command(
    host: Annotated[str, typer.Option(help="Address to bind; the default keeps the UI on this machine")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port")] = 5000,
    tracking_uri: TrackingUri = None,
) -> None:
    """Start the MLflow UI on the tracking store (Ctrl-C stops it); a tracking server has its own."""
    from initmem_core.tracking.store import open_client, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    if uri.startswith(("http://", "https://")):  # `mlflow ui` cannot open a server's store: the server is the UI
        open_client(uri)  # says so in one line if it does not answer
        typer.echo(f"{uri} is an MLflow tracking server: its UI is at {uri}")
        return
    typer.echo(f"MLflow UI for {uri} at http://{host}:{port}  (Ctrl-C to stop)")
    try:
        code = subprocess.run(ui_args(uri, host, port)).returncode
    except KeyboardInterrupt:
        return
    if code:
        raise fail(f"mlflow ui exited with code {code} (is port {port} already in use? try --port)", code)
