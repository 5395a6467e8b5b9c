"""`initmem ui` without a real server: MLflow's server is started lean (one worker, no job runner)
unless asked otherwise, and a server that exits early is reported in one line. The real server,
its URLs, the browser and the shutdown: tests/e2e/test_mlflow_ui.py."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_cli.ui import JOBS_ENV
from initmem_core.errors import ConfigError
from tests.support.local_services import free_port

runner = CliRunner()


class Starts(list):
    order: list[str]


@pytest.fixture
def started(monkeypatch, tmp_path):
    """What `initmem ui` asks to start: (args, env) per start. A stand-in server that exits with 3
    takes its place, in a process group of its own like the real one."""
    seen = Starts()
    real_popen = subprocess.Popen

    def stand_in(args, **kwargs):
        seen.append((args, kwargs["env"]))
        order.append("server")
        assert kwargs["start_new_session"]
        return real_popen(
            [sys.executable, "-c", "raise SystemExit(3)"],
            start_new_session=True,
            stdout=kwargs["stdout"],
            stderr=kwargs["stderr"],
        )

    monkeypatch.setattr("initmem_cli.ui.subprocess.Popen", stand_in)
    order = []

    def urls(uri, base, experiment, sweep):  # no store needed
        order.append("urls")
        if sweep == "bad":
            raise ConfigError("no such sweep")
        return [("MLflow UI", "")]

    monkeypatch.setattr("initmem_cli.ui.sweep_urls", urls)
    monkeypatch.delenv(JOBS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    seen.order = order
    return seen


def _ui(*options: str, env: dict | None = None):
    return runner.invoke(
        app, ["ui", "--port", str(free_port()), "--tracking-uri", "sqlite:///mlflow.db", *options], env=env
    )


def _workers(args: list[str]) -> str:
    return args[args.index("--workers") + 1]


def test_the_server_starts_with_one_worker_and_no_job_runner(started):
    handlers = [signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)]
    result = _ui()
    assert result.exit_code == 2
    assert "mlflow ui exited with code 3" in result.stderr and "Traceback" not in result.output
    [(args, env)] = started
    assert _workers(args) == "1" and env[JOBS_ENV] == "false"
    assert [signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)] == handlers  # restored


def test_workers_and_the_job_runner_can_be_asked_for(started):
    _ui("--workers", "3", "--jobs")
    _ui(env={JOBS_ENV: "true"})  # MLflow's own switch is honoured
    _ui("--no-jobs", env={JOBS_ENV: "true"})  # the option wins
    assert [(_workers(args), env[JOBS_ENV]) for args, env in started] == [("3", "true"), ("1", "true"), ("1", "false")]


def test_zero_workers_is_refused_before_anything_starts(started):
    result = _ui("--workers", "0")
    assert result.exit_code == 2 and "--workers" in result.stderr and not started


def test_a_named_sweep_and_a_new_store_are_checked_before_a_server_starts(started, tmp_path):
    assert _ui("--sweep", "bad").exit_code == 2 and not started  # a new store: nothing starts
    (tmp_path / "mlflow.db").write_bytes(b"")
    assert _ui("--sweep", "bad").exit_code == 2 and not started  # a name to check: nothing starts
    assert started.order == ["urls", "urls"]


def test_an_existing_store_is_read_while_the_server_starts(started, tmp_path):
    (tmp_path / "mlflow.db").write_bytes(b"")
    _ui()
    assert started.order == ["server", "urls"]


def test_a_store_without_the_experiment_opens_mlflows_home_with_the_training_sidebar(tracking_uri):
    from initmem_cli.ui import sweep_urls

    assert sweep_urls(tracking_uri, "", "initmem", None) == [
        ("MLflow UI (no experiment 'initmem' yet)", "/#/?workflowType=machine_learning")
    ]
