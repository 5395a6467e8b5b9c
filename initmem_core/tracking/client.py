"""Opening a tracking store so that a bad one fails in one line: a SQLite file that cannot be
written, a server that does not answer, a refused login or a locked database each become one
``ConfigError`` line, and MLflow's minutes of HTTP retries become one quick try.

Every module that talks to MLflow opens its client here (``open_client``) and writes batches
through ``writing.log_in_batches``, so the limits per call and the fail-fast rules live in one place.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlparse

from initmem_core.errors import ConfigError, InitmemError
from initmem_core.tracking.login import refusal
from initmem_core.tracking.mlflow_logs import quiet_mlflow
from initmem_core.tracking.paths import write_refused
from initmem_core.tracking.sqlite_store import (
    create_sqlite_store,
    creating_store,
    forget_interrupted_creation,
    wait_while_database_locked,
)
from initmem_core.tracking.uris import (
    artifact_root_for,
    check_experiment_name,
    check_tracking_uri,
    resolve_tracking_uri,
    sqlite_path,
)

CONNECT_TIMEOUT_S = 3.0
#: MLflow retries a failing HTTP request for minutes by default. Our callers either report a bad
#: store at once or buffer and retry on their own schedule, so one quick try is what they need.
FAIL_FAST_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}


@contextlib.contextmanager
def fail_fast_http() -> Iterator[None]:
    """MLflow reads these per request; values the user set are left alone."""
    added = [key for key in FAIL_FAST_HTTP if key not in os.environ]
    os.environ.update({key: FAIL_FAST_HTTP[key] for key in added})
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def python_handles_ctrl_c() -> bool:
    """Python's own handler is in place (``initmem sweep`` once it handles Ctrl-C itself): other
    handlers (the CLI's early ones, a run's StopSignals, a worker's SIG_IGN) are left to act."""
    return (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )


@contextlib.contextmanager
def ctrl_c_stays_an_interrupt() -> Iterator[None]:
    """A Ctrl-C inside ends the block at once with ``KeyboardInterrupt``, whatever the code inside
    made of it: pydantic, building one of MLflow's models as MLflow is imported, turns it into a
    ``SchemaError`` (a traceback, exit 1), and code that catches that may even go on."""
    if not python_handles_ctrl_c():
        yield
        return
    pressed: list[int] = []

    def interrupt(signum: int, frame: object) -> None:
        pressed.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    except BaseException:
        if pressed:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if pressed:
        raise KeyboardInterrupt


def _check_listening(uri: str) -> None:
    """A refused or silent server fails here in seconds, not after MLflow's minutes of retries."""
    address = urlparse(uri)
    port = address.port or (443 if address.scheme == "https" else 80)
    try:
        socket.create_connection((address.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(
            f"tracking store {uri} cannot be reached: {reason}; start the server or check --tracking-uri"
        ) from None


@contextlib.contextmanager
def store_must_answer(uri: str) -> Iterator[None]:
    """Turn any failure of the store inside into one ``ConfigError`` line."""
    try:
        with fail_fast_http():
            yield
    except InitmemError:
        raise  # already one line that says what to fix
    except Exception as error:  # a server that is not MLflow, bad scheme, corrupt or locked database
        refused = refusal(uri, error)
        if refused:  # the server answered: the URI is right, the login is not
            raise ConfigError(refused) from None
        first_line = error_line(error)
        if "database is locked" in first_line:  # SQLite's busy wait ran out: the store is there, and busy
            raise ConfigError(
                f"tracking store {uri} stayed locked by another process's write: {first_line}; "
                "run the command again once that process is done"
            ) from None
        raise ConfigError(f"tracking store {uri} cannot be reached: {first_line}; check --tracking-uri") from None


def error_line(error: BaseException) -> str:
    """The first line of an error's message (SQL errors go on with the statement), or its type."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def open_client(uri: str | None = None, probe: bool = True, create: bool = True):
    """An ``MlflowClient`` on a store that is known to answer; ``ConfigError`` if it does not.
    ``probe=False``: the caller's own first request, under ``store_must_answer``, is the probe.
    ``create=False`` (commands that only read: report, export, clean): a SQLite store that does
    not exist is a ``ConfigError`` naming where it was looked for, and nothing is created."""
    uri = check_tracking_uri(resolve_tracking_uri(uri))
    database = sqlite_path(uri)
    if database and not create and not database.exists():
        raise ConfigError(
            f"no tracking store at {uri} ({database} does not exist); give --tracking-uri "
            "(or MLFLOW_TRACKING_URI) the store the sweep was tracked in"
        )
    with ctrl_c_stays_an_interrupt():
        from mlflow.tracking import MlflowClient

        quiet_mlflow()

    if database:
        if write_refused(database.parent) is not None:
            raise ConfigError(
                f"tracking store {uri} cannot be written: {database.parent} is missing or read-only; "
                "pass --tracking-uri with a writable path or a server URL"
            )
        # The first request creates or migrates the database; two commands doing so at once on a
        # fresh folder collide in alembic, so that request is made under a lock beside the file.
        wait_while_database_locked(database, uri)  # before the file lock: others then name the real holder
        # MLflow's SQL store module takes over a second to import: not while holding the lock
        # every other command opening this store waits on.
        with ctrl_c_stays_an_interrupt():
            import mlflow.store.tracking.sqlalchemy_store  # noqa: F401

        with creating_store(database, uri), store_must_answer(uri):
            forget_interrupted_creation(uri, database)
            if not database.exists():
                create_sqlite_store(database)
            client = MlflowClient(tracking_uri=uri)
            client.search_experiments(max_results=1)
        return client
    if uri.startswith(("http://", "https://")):
        _check_listening(uri)
    client = MlflowClient(tracking_uri=uri)
    if probe:
        with store_must_answer(uri):
            client.search_experiments(max_results=1)
    return client


def ensure_experiment(client, uri: str, name: str) -> str:
    experiment = client.get_experiment_by_name(check_experiment_name(name))
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_root_for(uri, name))
    except Exception:  # created meanwhile by a parallel worker
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id
