"""``initmem ui``: the MLflow UI on the same store the runs and sweeps write to, opened on the runs.

MLflow's server starts lean here: one uvicorn worker and no job runner. Its defaults (4 workers,
a job runner and 7 huey consumers for the GenAI features, each importing MLflow) take two to three
times as long to answer on a 2-core machine and serve nothing a training run uses; ``--workers``
and ``--jobs`` bring them back (docs/PERFORMANCE.md has the start-up times).

The server runs in its own process group (``mlflow ui`` starts uvicorn workers, and with
``--jobs`` a job runner with its own children): Ctrl-C, SIGTERM and SIGHUP stop that whole group,
so nothing is left serving the port.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Annotated

import typer

from initmem_core.errors import ConfigError
from initmem_core.tracking.client import open_client
from initmem_core.tracking.ui_view import home_url, runs_url, view_url, write_view
from initmem_core.tracking.uris import resolve_tracking_uri, sqlite_path
from initmem_core.vocabulary import PARENT_ROLE, ROLE_TAG, SWEEP_TAG

from .errors import fail, user_errors
from .options import DEFAULT_EXPERIMENT, Experiment, TrackingUri

START_TIMEOUT_S = 180.0  # a first start migrates the SQLite schema: tens of seconds on a slow disk
STOP_TIMEOUT_S = 10.0
DEFAULT_UI = "http://127.0.0.1:5000"  # where `initmem ui` serves with its defaults
SERVER = "Server"
#: MLflow 3's switch for its job runner (GenAI jobs: judges, prompt optimization, trace roll-ups).
JOBS_ENV = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"


def ui_args(uri: str, host: str, port: int, workers: int = 1) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        uri,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]


def server_env(jobs: bool) -> dict[str, str]:
    """This process's environment, with MLflow's job runner on or off."""
    return {**os.environ, JOBS_ENV: "true" if jobs else "false"}


def answers(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL to what is left after ``STOP_TIMEOUT_S``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, 0)  # anyone left in the group?
            except ProcessLookupError:
                process.poll()
                return
            process.poll()  # reap the leader, or the group never empties
            time.sleep(0.1)


def last_line(log) -> str:
    log.seek(0)
    lines = log.read().decode(errors="replace").strip().splitlines()
    return f": {lines[-1][:300]}" if lines else ""


def sweep_urls(uri: str, base: str, experiment: str, sweep: str | None) -> list[tuple[str, str]]:
    """(what, URL) to print: the experiment's runs page and the prepared view of a sweep."""
    from initmem_core.tracking.records import resolve_parent  # lazy: keeps tracking.records out of the CLI's start-up

    client = open_client(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        if sweep:
            raise ConfigError(
                f"experiment '{experiment}' does not exist in this tracking store; "
                "check --experiment and --tracking-uri"
            )
        return [("MLflow UI (no experiment '" + experiment + "' yet)", home_url(base))]
    urls = [(f"runs of experiment '{experiment}'", runs_url(base, found.experiment_id))]
    if sweep:
        parent = resolve_parent(client, experiment, sweep)
    else:
        newest = client.search_runs(
            [found.experiment_id],
            f"tags.`{ROLE_TAG}` = '{PARENT_ROLE}'",
            max_results=1,
            order_by=["attributes.start_time DESC"],
        )
        parent = newest[0] if newest else None
    if parent is not None:
        name = parent.data.tags[SWEEP_TAG]
        key = write_view(client, found.experiment_id, name, parent.info.run_id)  # a sweep from before views
        urls.append((f"sweep '{name}', prepared comparison", view_url(base, found.experiment_id, key)))
    return urls


def print_urls(urls: list[tuple[str, str]]) -> None:
    width = max(len(what) for what, _ in urls)
    for what, url in urls:
        typer.echo(f"{what + ':':<{width + 1}} {url}")


@user_errors
def ui_command(
    host: Annotated[
        str, typer.Option(help="Address to bind; the default keeps the UI on this machine", rich_help_panel=SERVER)
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port", rich_help_panel=SERVER)] = int(
        DEFAULT_UI.rsplit(":", 1)[1]
    ),
    workers: Annotated[
        int, typer.Option(min=1, help="Uvicorn worker processes; one serves a person's browser", rich_help_panel=SERVER)
    ] = 1,
    jobs: Annotated[
        bool,
        typer.Option(
            "--jobs/--no-jobs",
            envvar=JOBS_ENV,
            show_envvar=False,
            help="Start MLflow's job runner (only its GenAI features use it; "
            "MLflow's own environment variable for it is honoured)",
            rich_help_panel=SERVER,
        ),
    ] = False,
    sweep: Annotated[
        str | None, typer.Option(help="Open this sweep's prepared view (default: the newest sweep)")
    ] = None,
    open_browser: Annotated[bool, typer.Option("--open", help="Open the prepared view in a web browser")] = False,
    experiment: Experiment = DEFAULT_EXPERIMENT,
    tracking_uri: TrackingUri = None,
) -> None:
    """Start the MLflow UI on the tracking store and print where a sweep's comparison is (Ctrl-C stops it)."""
    uri = resolve_tracking_uri(tracking_uri)
    if uri.startswith(("http://", "https://")):  # `mlflow ui` cannot open a server's store: the server is the UI
        open_client(uri)  # says so in one line if it does not answer
        served = sweep_urls(uri, uri, experiment, sweep)
        typer.echo(f"{uri} is an MLflow tracking server; its UI:")
        print_urls(served)
        if open_browser:
            import webbrowser

            webbrowser.open(served[-1][1])
        return
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    # A sweep named on the command line is checked, and a new store created, before a server
    # starts; an existing store with nothing to check is read while the server starts (MLflow's
    # import here costs seconds).
    database = sqlite_path(uri)
    urls = (
        None
        if sweep is None and database is not None and database.is_file()
        else sweep_urls(uri, "", experiment, sweep)
    )
    if answers(base):
        raise fail(f"port {port} already answers as a server on {host}; stop it or choose another --port")
    # Its own process group: a signal to that group reaches every worker the server started.
    log = tempfile.TemporaryFile()  # not a pipe: a pipe nobody reads fills up and stalls the server
    process = subprocess.Popen(
        ui_args(uri, host, port, workers), env=server_env(jobs), start_new_session=True, stdout=log, stderr=log
    )

    def stop(signum, frame):
        raise KeyboardInterrupt

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        if urls is None:
            urls = sweep_urls(uri, "", experiment, sweep)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers(base):
            if process.poll() is not None:
                raise fail(
                    f"mlflow ui exited with code {process.returncode}{last_line(log)} "
                    f"(is port {port} in use? try --port)"
                )
            if time.monotonic() > deadline:
                raise fail(f"mlflow ui did not answer on {base} within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.2)
        print_urls([(what, f"{base}{url}" if url.startswith("/") or not url else url) for what, url in urls])
        typer.echo("(Ctrl-C stops the UI)")
        if open_browser:
            import webbrowser

            webbrowser.open(f"{base}{urls[-1][1]}")
        if process.wait():
            raise fail(f"mlflow ui exited with code {process.returncode}{last_line(log)}")
    except KeyboardInterrupt:
        pass
    finally:
        stop_group(process)
        log.close()
        for sig, handler in before.items():  # a caller in the same process (a test) keeps its own
            signal.signal(sig, handler)
