"""Tracking into an MLflow server with a login (``mlflow server --app-name basic-auth``), a real
one on 127.0.0.1: the credentials come from MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD
and reach every process that writes (``initmem run``'s helper, a sweep's local workers through
the sweep, Ray tasks started by a head that never saw them, Slurm jobs through submitit's local
executor); a refused login is one line and exit code 2 with nothing written; a login that
expires while a run trains leaves its figures for ``initmem sync``.

First, without a server (tracking/login.py): what a server's refusal of the login becomes
(``store.refusal``), and which login variables a Ray task is handed (``credentials_env``, set in
the task by ``logged_in``). The tests that start a server are slow; these are not.

Ray reaches for outside addresses: its test runs in a network namespace with only loopback, in the
same pytest as the executor suite (``tests/plugins/executors/test_executors_isolated.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from initmem_core.errors import ConfigError
from initmem_core.tracking.login import CREDENTIAL_ENV, login_must_be_taken, refusal
from tests.support.cli_processes import SMALL_CELL_ARGS, initmem_command
from tests.support.local_services import add_user, auth_request, login_server, ray_head
from tests.support.network_isolation import loopback_only

URI = "http://head-node:5000"


class ServerError(Exception):
    """What MLflow's client raises for an error response: its message and the ``error_code`` name
    MLflow gives the HTTP status (401 UNAUTHENTICATED, 403 PERMISSION_DENIED). A stand-in, so the
    quick loop does not import MLflow; the server tests below meet the real ones."""

    def __init__(self, message: str, error_code: str):
        super().__init__(message)
        self.error_code = error_code


CODES = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 500: "INTERNAL_ERROR"}


def mlflow_error(status: int, body: str) -> ServerError:
    return ServerError(
        f"API request to endpoint /api/2.0/mlflow/runs/create failed with error code {status} "
        f"!= 200. Response body: '{body}'",
        CODES[status],
    )


@pytest.fixture
def login(monkeypatch):
    def set_login(user=None, password=None, token=None):
        for key, value in zip(CREDENTIAL_ENV, (user, password, token)):
            if value is None:
                monkeypatch.delenv(key, raising=False)
            else:
                monkeypatch.setenv(key, value)

    set_login()
    return set_login


def test_a_refused_password_names_the_user_and_both_variables_but_never_the_password(login):
    login("bob", "s3cret-pw")
    line = refusal(URI, mlflow_error(401, "You are not authenticated."))
    assert line.startswith(f"tracking server {URI} refused the credentials (user 'bob'")
    assert "MLFLOW_TRACKING_USERNAME" in line and "MLFLOW_TRACKING_PASSWORD" in line
    assert "s3cret-pw" not in line and "\n" not in line


def test_no_login_at_all_says_the_variables_are_not_set(login):
    line = refusal(URI, mlflow_error(401, "You are not authenticated."))
    assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD are not set" in line


def test_a_user_without_permission_is_told_so_and_which_request(login):
    login("bob", "pw")
    line = refusal(URI, mlflow_error(403, "Permission denied"))
    assert "refused user 'bob' permission" in line and "/api/2.0/mlflow/runs/create" in line
    assert "MLFLOW_TRACKING_USERNAME" in line and "--experiment" in line


def test_an_artifact_upload_refused_by_http_status_is_a_refused_login_too(login):
    """Uploads through the server's artifact proxy raise requests' HTTPError, with no MLflow code."""

    class Response:
        status_code = 401

    class HTTPError(Exception):
        response = Response()

    login("bob", "pw")
    error = HTTPError(f"401 Client Error: Unauthorized for url: {URI}/api/2.0/mlflow-artifacts/artifacts/1/x.pt")
    assert refusal(URI, error).startswith(f"tracking server {URI} refused the credentials (user 'bob'")
    Response.status_code = 403
    assert "/api/2.0/mlflow-artifacts/artifacts/1/x.pt" in refusal(URI, error)
    Response.status_code = 404
    assert refusal(URI, error) == ""


def test_other_errors_are_not_a_refused_login(login):
    login("bob", "pw")
    assert refusal(URI, mlflow_error(403, "Invalid Host header - possible DNS rebinding attack detected")) == ""
    assert refusal(URI, mlflow_error(500, "boom")) == ""
    assert refusal(URI, ConnectionError("refused")) == ""


def test_login_must_be_taken_turns_only_a_refusal_into_one_config_error(login):
    with pytest.raises(ConfigError, match="refused the credentials"):
        with login_must_be_taken(URI):
            raise mlflow_error(401, "You are not authenticated.")
    with pytest.raises(ValueError):
        with login_must_be_taken(URI):
            raise ValueError("not about the login")


def test_only_the_login_variables_that_are_set_go_to_a_worker_and_only_while_it_runs(login, monkeypatch):
    from initmem_plugins.executors.ray_executor import credentials_env, logged_in

    assert credentials_env() == {}
    login("bob", "pw")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", URI)  # not a login variable: the task names its store itself
    handed = credentials_env()
    assert handed == {"MLFLOW_TRACKING_USERNAME": "bob", "MLFLOW_TRACKING_PASSWORD": "pw"}
    login(password="other")  # the worker's own environment, e.g. a head's
    with logged_in(handed):
        assert credentials_env() == handed
    assert credentials_env() == {"MLFLOW_TRACKING_PASSWORD": "other"}
    login(token="t0ken")
    assert credentials_env() == {"MLFLOW_TRACKING_TOKEN": "t0ken"}


# With a real login server.

ADMIN_PASSWORD = "admin-" + os.urandom(6).hex()
USER, PASSWORD = "alice", "alice-" + os.urandom(6).hex()
LOGIN = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def server(tmp_path_factory, _empty_store):
    """The login server, with one user who may write (the experiment is hers once she makes it)."""
    folder = tmp_path_factory.mktemp("login-server")
    with login_server(folder, ADMIN_PASSWORD, database=_empty_store) as url:
        add_user(url, folder, USER, PASSWORD, ADMIN_PASSWORD)
        yield url


@pytest.fixture
def as_user(monkeypatch):
    """This process (and what it starts) logs in as ``USER``; returns a setter for another login."""

    def login(user: str | None = USER, password: str | None = PASSWORD) -> None:
        for key, value in zip(LOGIN, (user, password)):
            if value is None:
                monkeypatch.delenv(key, raising=False)
            else:
                monkeypatch.setenv(key, value)

    login()
    return login


def admin_client(url: str):
    """A client that reads the store as the admin, whatever this process's environment says:
    MLflow reads the login per request, so it is set around each call."""
    from mlflow.tracking import MlflowClient

    class AsAdmin:
        def __init__(self):
            self.client = MlflowClient(url)

        def __getattr__(self, name):
            call = getattr(self.client, name)

            def wrapped(*args, **kwargs):
                saved = {key: os.environ.get(key) for key in LOGIN}
                os.environ.update(dict(zip(LOGIN, ("admin", ADMIN_PASSWORD))))
                try:
                    return call(*args, **kwargs)
                finally:
                    for key, value in saved.items():
                        os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)

            return wrapped

    return AsAdmin()


def all_runs(url: str) -> list:
    client = admin_client(url)
    return [run for experiment in client.search_experiments() for run in client.search_runs([experiment.experiment_id])]


def sweep_children(url: str, sweep: str) -> list:
    return [
        run
        for run in all_runs(url)
        if run.data.tags.get("initmem.sweep") == sweep and run.data.tags.get("initmem.role") != "parent"
    ]


def assert_one_refusal_line(output: str, secret: str) -> None:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert "refused the credentials" in lines[0] and all(key in lines[0] for key in LOGIN), lines[0]
    assert secret not in output


@pytest.mark.slow  # a real login server
def test_a_refused_login_is_one_line_exit_2_and_writes_nothing(server, as_user, tmp_path):
    before = {run.info.run_id for run in all_runs(server)}
    experiments = {e.name for e in admin_client(server).search_experiments()}
    wrong = "wrong-" + os.urandom(4).hex()
    # `initmem run` as a user runs it: a fresh process whose tracking helper opens the store.
    env = {**os.environ, "MLFLOW_TRACKING_USERNAME": USER, "MLFLOW_TRACKING_PASSWORD": wrong}
    result = subprocess.run(
        initmem_command(
            "run",
            *SMALL_CELL_ARGS,
            "--tracking-uri",
            server,
            "--experiment",
            "refused",
        ),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert_one_refusal_line(result.stderr, wrong)
    assert f"user '{USER}'" in result.stderr
    # A sweep with no login at all, and a report.
    as_user(None, None)
    for command in (
        ["sweep", *SMALL_CELL_ARGS, "--sigma", "0.5,2", "--name", "refused", "--out", str(tmp_path / "out")],
        ["report", "refused"],
    ):
        result = runner.invoke(app(), [*command, "--tracking-uri", server, "--experiment", "refused"])
        assert result.exit_code == 2, result.output
        assert_one_refusal_line(result.stderr, PASSWORD)
        assert "are not set" in result.stderr and PASSWORD not in result.output
    assert {run.info.run_id for run in all_runs(server)} == before  # nothing half-written
    assert {e.name for e in admin_client(server).search_experiments()} == experiments
    assert not (tmp_path / "initmem-unsynced").exists() and not (tmp_path / "out").exists()


def app():
    from initmem_cli.app import app as initmem

    return initmem


@pytest.mark.slow(seconds=25)  # a real login server
def test_local_workers_land_runs_and_report_and_ui_work_with_the_login(server, as_user, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(
        app(),
        [
            "sweep",
            *SMALL_CELL_ARGS,
            "--sigma",
            "0.5,2",
            "--name",
            "login-local",
            "--workers",
            "2",
            "--tracking-uri",
            server,
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    runs = sweep_children(server, "login-local")
    assert len(runs) == 2 and {run.info.status for run in runs} == {"FINISHED"}
    assert all(len(admin_client(server).get_metric_history(run.info.run_id, "train_loss")) == 3 for run in runs)
    assert PASSWORD not in result.output
    report = runner.invoke(
        app(),
        ["report", "login-local", "--format", "json", "--tracking-uri", server, "--out", str(tmp_path / "report")],
    )
    assert report.exit_code == 0, report.output
    assert {row["sigma"] for row in json.loads(report.stdout)["rows"]} == {0.5, 2.0}
    ui = runner.invoke(app(), ["ui", "--sweep", "login-local", "--tracking-uri", server])
    assert ui.exit_code == 0, ui.output
    assert f"{server} is an MLflow tracking server" in ui.output and "prepared comparison" in ui.output
    as_user(USER, "wrong-" + os.urandom(4).hex())
    refused = runner.invoke(app(), ["ui", "--tracking-uri", server])
    assert refused.exit_code == 2
    assert_one_refusal_line(refused.stderr, PASSWORD)


@pytest.mark.slow(seconds=30)  # a real login server
def test_slurm_jobs_get_the_login_through_submitits_local_executor(server, as_user, tmp_path):
    result = runner.invoke(
        app(),
        [
            "sweep",
            *SMALL_CELL_ARGS,
            "--sigma",
            "0.5,2",
            "--name",
            "login-slurm",
            "--executor",
            "slurm",
            "--slurm-local",
            "--tracking-uri",
            server,
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    runs = sweep_children(server, "login-slurm")
    assert len(runs) == 2 and {run.info.status for run in runs} == {"FINISHED"}
    assert all(run.data.tags["initmem.attempts"] == "1" for run in runs)  # written by the job itself
    assert PASSWORD not in result.output


@pytest.mark.slow(seconds=30)  # a real login server
def test_a_login_that_expires_mid_run_keeps_the_figures_for_initmem_sync(server, as_user, tmp_path):
    """The admin changes the user's password while ``initmem run`` trains: the run goes on, what
    the server refuses waits in initmem-unsynced/, and ``initmem sync`` with the new password
    uploads it."""
    epochs = 30
    env = dict(os.environ)
    process = subprocess.Popen(
        initmem_command(
            "run",
            *SMALL_CELL_ARGS[:4],
            "--epochs",
            str(epochs),
            *SMALL_CELL_ARGS[6:],
            "--seed",
            "7",
            "--tracking-uri",
            server,
        ),
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client, deadline, run = admin_client(server), time.monotonic() + 240, None
        # The password changes as soon as the run and its params are in the store (the helper
        # logged in), well before training ends: the helper sends metrics in batches up to 5 s
        # apart, so a run that trained to its end between two polls would land whole.
        while run is None:
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            found = [r for r in all_runs(server) if r.info.run_name == "resnet20-sgd-b32-n128-s1.0-seed7"]
            run = found[0] if found and found[0].data.params else None
            time.sleep(0.1)
        new_password = "alice-" + os.urandom(6).hex()
        auth_request(
            server,
            "update-password",
            {"username": USER, "password": new_password},
            "admin",
            ADMIN_PASSWORD,
            method="PATCH",
        )
        out, err = process.communicate(timeout=600)
    finally:
        process.kill()
    assert process.returncode == 0, out + err
    said = " ".join((out + err).split())
    assert "refused the credentials" in said and f"initmem sync --tracking-uri {server}" in said, said
    assert all(key in said for key in LOGIN) and PASSWORD not in said and new_password not in said
    stored = client.get_run(run.info.run_id)
    held = len(client.get_metric_history(run.info.run_id, "train_loss"))
    assert stored.info.status == "RUNNING" and held < epochs + 1  # the rest waits here
    assert (tmp_path / "initmem-unsynced" / f"{run.info.run_id}.jsonl").exists()
    refused = subprocess.run(
        initmem_command("sync", "--tracking-uri", server),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )  # still the old password
    assert refused.returncode == 2 and "refused the credentials" in refused.stderr
    env["MLFLOW_TRACKING_PASSWORD"] = new_password
    synced = subprocess.run(
        initmem_command("sync", "--tracking-uri", server),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert client.get_run(run.info.run_id).info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")] == list(range(epochs + 1))
    assert "final_weights.pt" in {f.path for f in client.list_artifacts(run.info.run_id)}
    assert not list((tmp_path / "initmem-unsynced").glob("*.jsonl"))  # uploaded, then deleted


@pytest.mark.slow  # a real login server
@pytest.mark.skipif(
    not loopback_only(), reason="Ray needs a loopback-only network namespace (test_executors_isolated.py)"
)
def test_ray_tasks_get_the_login_though_their_head_never_saw_it(server, as_user, tmp_path, monkeypatch):
    """A cluster is started by someone, somewhere, without this user's login: the sweep hands its
    tasks the login variables (with their arguments), and no log of Ray's holds them (a runtime
    environment would be written into runtime_env_agent.log)."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a test head on this machine
    head_env = {key: value for key, value in os.environ.items() if key not in LOGIN}
    with ray_head(2, head_env) as address:
        result = runner.invoke(
            app(),
            [
                "sweep",
                *SMALL_CELL_ARGS,
                "--sigma",
                "0.5,2",
                "--name",
                "login-ray",
                "--executor",
                "ray",
                "--ray-address",
                address,
                "--tracking-uri",
                server,
                "--out",
                str(tmp_path / "out"),
            ],
        )
        logs = [path for path in Path("/tmp").glob("ray*/session_*/logs/*") if path.is_file()]
        leaked = [str(path) for path in logs if PASSWORD.encode() in path.read_bytes()]
    assert result.exit_code == 0, result.output
    runs = sweep_children(server, "login-ray")
    assert len(runs) == 2 and {run.info.status for run in runs} == {"FINISHED"}
    assert all(run.data.tags["initmem.attempts"] == "1" for run in runs)  # written by the Ray task itself
    assert PASSWORD not in result.output and logs and not leaked
