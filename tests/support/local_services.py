"""Real services for tests, on this machine: an MLflow tracking server (with or without a login) and a
Ray head node. Tests only: no benchmark starts a service any more (server_load.py and login_cost.py,
the last that did, are retired; docs/distributed.md), so the one home of these starters is here.

Each starts in a session of its own, so that stopping it ends every process it started (Ray's
worker processes, which are put in sessions of their own, are found as the head's descendants).
``with mlflow_server(...)`` and ``with ray_head(...)`` stop them on the way out, pass or fail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

STARTUP_S = 120  # a loaded 2-core machine starts an MLflow server in 20 s; leave room


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def processes() -> Iterator[tuple[int, str, str, int]]:
    """(pid, name, state, parent pid) of every process, from /proc (Linux)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # exited meanwhile
                continue
            name, (state, parent) = (
                stat[stat.index("(") + 1 : stat.rindex(")")],
                stat[stat.rindex(")") + 2 :].split()[:2],
            )
            yield int(entry.name), name, state, int(parent)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for pid, _, _, parent in processes():
        tree.setdefault(parent, []).append(pid)
    return tree


def _group_and_descendants(pgid: int) -> set[int]:
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(entry.name)) == pgid:
                    members.add(int(entry.name))
    tree, todo = _children(), list(members)
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in members:
                members.add(child)
                todo.append(child)
    return members


def stop_session(pgid: int, grace_s: float = 5.0) -> None:
    """SIGTERM every process of the group and their descendants, then SIGKILL what is left."""
    pids = _group_and_descendants(pgid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"  # a zombie has ended; its parent reaps it


@contextlib.contextmanager
def serve(options: list[str], log: Path, env: dict[str, str], startup_s: float = STARTUP_S) -> Iterator[str]:
    """``mlflow server OPTIONS`` on 127.0.0.1 and a free port, in a session of its own, its output
    in ``log``; yields its URL once ``/health`` answers, and stops the whole session on the way out."""
    port = free_port()
    with open(log, "wb") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", *options, "--host", "127.0.0.1", "--port", str(port)],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            with contextlib.suppress(OSError):
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        stop_session(server.pid)
        server.wait()


@contextlib.contextmanager
def mlflow_server(database: Path, artifacts: Path, login: dict[str, str] | None = None) -> Iterator[str]:
    """``mlflow server`` on a SQLite database, one worker; yields its URL once healthy.
    ``login``: the server's environment for ``--app-name basic-auth`` (see ``login_server``)."""
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")  # a process the tests do not need
    for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        env.pop(key, None)  # a client's login, not the server's
    env.update(login or {})
    app = ["--app-name", "basic-auth"] if login else []
    options = [*app, "--backend-store-uri", f"sqlite:///{database}", "--artifacts-destination", str(artifacts)]
    with serve([*options, "--workers", "1"], database.parent / "mlflow-server.log", env) as url:
        yield url


@contextlib.contextmanager
def login_server(folder: Path, admin_password: str, database: Path | None = None) -> Iterator[str]:
    """``mlflow server --app-name basic-auth`` (MLflow's login) in ``folder``, bound to
    127.0.0.1, its users in ``folder/basic_auth.db``, every user allowed to read and none to
    write what another made (MLflow's default); the admin is ``admin`` with ``admin_password``.
    ``database``: an already migrated tracking database to start from (copied into ``folder``)."""
    store = folder / "server.db"
    if database is not None:
        shutil.copy(database, store)
    with mlflow_server(store, folder / "artifacts", login=login_environment(folder, admin_password)) as url:
        cheapen_password_hash(users_database(folder), ADMIN, admin_password)
        yield url


def add_user(url: str, folder: Path, user: str, password: str, admin_password: str) -> None:
    """Create ``user`` through the login server in ``folder`` (``login_server``), as an admin would."""
    auth_request(url, "create", {"username": user, "password": password}, ADMIN, admin_password)
    cheapen_password_hash(users_database(folder), user, password)


def auth_request(url: str, path: str, body: dict, user: str, password: str, method: str = "POST") -> dict:
    """One call to the basic-auth server's user API (``/api/2.0/mlflow/users/...``) as ``user``."""
    import base64
    import json

    request = urllib.request.Request(
        f"{url}/api/2.0/mlflow/users/{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


@contextlib.contextmanager
def ray_head(num_cpus: int, env: dict[str, str]) -> Iterator[str]:
    """``ray start --head``; yields its address. Ray binds its servers to every interface and
    advertises the machine's address even when asked for 127.0.0.1: it has no loopback-only mode."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    log = Path(temp) / "ray-start.log"
    with open(log, "wb") as output:  # a file, not a pipe: the head's processes inherit it and live on
        start = subprocess.Popen(
            [
                "ray",
                "start",
                "--head",
                "--num-cpus",
                str(num_cpus),
                "--port",
                str(port),
                "--include-dashboard=false",
                "--disable-usage-stats",
                "--temp-dir",
                temp,
            ],
            env=env,
            start_new_session=True,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        if start.wait(timeout=STARTUP_S) != 0:
            raise RuntimeError(f"ray start failed:\n{log.read_text()[-3000:]}")
        yield f"127.0.0.1:{port}"
    finally:
        stop_session(start.pid)  # the session outlives `ray start`, which exits once the head is up
        shutil.rmtree(temp, ignore_errors=True)


# -- What MLflow's login server (``mlflow server --app-name basic-auth``) needs in a folder

ADMIN = "admin"


def users_database(folder: Path) -> Path:
    """Where the login server in ``folder`` keeps its users and permissions."""
    return folder / "basic_auth.db"


def login_environment(folder: Path, admin_password: str) -> dict[str, str]:
    """Write ``folder/basic_auth.ini`` (every user may read, none may write what another made: MLflow's
    default; the admin is ``ADMIN``) and return the variables the server reads it and its secrets from."""
    config = folder / "basic_auth.ini"
    config.write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = sqlite:///{users_database(folder)}\nadmin_username = {ADMIN}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    return {
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_AUTH_ADMIN_PASSWORD": admin_password,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": os.urandom(16).hex(),
    }


def cheapen_password_hash(users: Path, user: str, password: str) -> None:
    """Store ``user``'s password hash with one round of PBKDF2 in place of werkzeug's scrypt. The
    server checks the hash on every request, and scrypt costs about 0.4 s of server CPU each time
    on a 2-core machine (docs/distributed.md): a tracked run's hundreds of requests would take
    minutes. Which login is accepted does not depend on the hash's cost."""
    from werkzeug.security import generate_password_hash

    cheap = generate_password_hash(password, method="pbkdf2:sha256:1")
    with contextlib.closing(sqlite3.connect(users)) as connection, connection:
        changed = connection.execute("UPDATE users SET password_hash = ? WHERE username = ?", (cheap, user)).rowcount
    if changed != 1:
        raise ValueError(f"no user {user!r} in {users}")
