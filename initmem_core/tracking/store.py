"""The tracking store: which one (URIs), opening it so that a bad one fails in one line, and
writing to it in batches within MLflow's limits.

Every module that talks to MLflow opens its client here (``open_client``) and writes batches
through ``log_in_batches``, so the limits per call and the fail-fast rules live in one place.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from initmem_core.errors import ConfigError, InitmemError

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
DEFAULT_EXPERIMENT = "initmem"
CONNECT_TIMEOUT_S = 3.0
LOCK_PATIENCE_S = 1.0  # how long a held store lock is waited for before the wait is said
#: MLflow's limits per ``log_batch`` call.
BATCH_LIMITS = {"metrics": 1000, "params": 100, "tags": 100}
#: MLflow retries a failing HTTP request for minutes by default. Our callers either report a bad
#: store at once or buffer and retry on their own schedule, so one quick try is what they need.
FAIL_FAST_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}
#: Backends MLflow 3 tracks into (a database dialect may name its driver: postgresql+psycopg2).
SUPPORTED_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")
ALLOW_FILE_STORE_ENV = "MLFLOW_ALLOW_FILE_STORE"
MAX_EXPERIMENT_NAME = 500  # MLflow's MAX_EXPERIMENT_NAME_LENGTH (not imported: this module stays light)
#: Where MLflow's client takes a login to a tracking server from (``mlflow server --app-name
#: basic-auth``: a user and password; a bearer token for other servers). Read from the environment
#: only, never from a command line, and handed on to remote workers (``credentials_env``).
USERNAME_ENV, PASSWORD_ENV, TOKEN_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"
CREDENTIAL_ENV = (USERNAME_ENV, PASSWORD_ENV, TOKEN_ENV)


def check_tracking_uri(uri: str) -> str:
    """A URI MLflow can track into, else one line saying what to pass instead (MLflow itself
    answers a bad one with a long traceback, and a plain path with a refusal of file stores)."""
    scheme = urlparse(uri).scheme.lower()
    file_store_allowed = os.environ.get(ALLOW_FILE_STORE_ENV, "").lower() == "true"
    if (file_store_allowed and scheme in ("", "file")) or len(scheme) == 1:
        return uri  # the user opted into MLflow's file store (one letter: a Windows drive)
    if scheme in ("", "file"):
        path = urlparse(uri).path if scheme else uri
        raise ConfigError(
            f"--tracking-uri {uri} is a path, not a tracking store; "
            f"for a SQLite database there pass sqlite:///{Path(path).expanduser().resolve()}"
        )
    if scheme.split("+")[0] not in SUPPORTED_SCHEMES:
        raise ConfigError(
            f"--tracking-uri {uri}: unsupported scheme '{scheme}'; use sqlite:///path/to/mlflow.db "
            "or a server http(s)://host:port"
        )
    if scheme in ("http", "https") and not urlparse(uri).hostname:
        raise ConfigError(f"--tracking-uri {uri} names no host; use http(s)://host:port")
    return uri


def check_experiment_name(name: str) -> str:
    if not name.strip():
        raise ConfigError("--experiment must not be empty; leave it out for the default, initmem")
    if len(name) > MAX_EXPERIMENT_NAME:
        raise ConfigError(
            f"--experiment is {len(name)} characters long; MLflow takes names of at most "
            f"{MAX_EXPERIMENT_NAME}: choose a shorter one"
        )
    return name


# -- names that become paths -----------------------------------------------------------------

_UNSAFE = re.compile(r"[^\w.,=+@-]")


def safe_file_name(name: str) -> str:
    """``name`` as one file name that cannot leave its folder: separators and anything unusual
    become ``_``, leading dots go (no ``..``, no hidden files), at most 200 characters."""
    safe = _UNSAFE.sub("_", name).lstrip(".")[:200]
    return safe or "_"


def path_under(root: str | Path, name: str) -> Path:
    """``root/<safe_file_name(name)>``, checked to stay under ``root`` whatever links say."""
    root = Path(root)
    path = root / safe_file_name(name)
    if not path.resolve().is_relative_to(root.resolve()):
        raise ConfigError(f"{name!r} leads out of {root}; choose another name")
    return path


def check_writable_folder(folder: str | Path, flag: str) -> Path:
    """A folder that exists or can be created, and can be written: checked (without creating
    anything) before any training, so a bad path fails at once rather than after every run."""
    folder = Path(folder).expanduser()
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{flag} {folder}: {existing} is not a folder")
    try:  # a real write: permission bits say nothing for root or on a read-only mount
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        reason = error.strerror or errno.errorcode.get(error.errno or 0, type(error).__name__)
        raise ConfigError(
            f"{flag} {folder} cannot be written ({reason} in {existing}); choose a writable folder"
        ) from None
    return folder


def resolve_tracking_uri(uri: str | None = None) -> str:
    """``--tracking-uri``, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` here."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///") :]).expanduser().resolve() if uri.startswith("sqlite:///") else None


def store_folder(uri: str | None) -> Path:
    """Where local files of a store's runs go (checkpoints, unsynced metrics): beside a SQLite
    database, else in the current folder."""
    database = sqlite_path(resolve_tracking_uri(uri))
    return database.parent if database else Path.cwd()


def same_store(first: str, second: str) -> bool:
    return (sqlite_path(first) or first.rstrip("/")) == (sqlite_path(second) or second.rstrip("/"))


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


def quiet_mlflow() -> None:
    # MLflow's INFO lines (database migrations, run links) would break our progress display.
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for handler in logging.getLogger("mlflow").handlers:
        if not any(isinstance(f, OneLineLogs) for f in handler.filters):
            handler.addFilter(OneLineLogs())


class OneLineLogs(logging.Filter):
    """MLflow's own error logs as one line each. A database error it logs with its traceback
    (60 lines) before raising it is dropped: whoever catches it says it, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "mlflow.store.db.utils" and record.exc_info:
            return False
        text = record.getMessage().strip()
        if record.exc_info or "\n" in text:
            record.msg, record.args = (text.splitlines() or [""])[0][:300], ()
            record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def artifact_root_for(uri: str, experiment: str) -> str | None:
    """For a SQLite store, keep artifacts beside the database (as ``mlflow server`` does), in a
    folder named after the experiment that stays under ``mlartifacts`` whatever the name says."""
    database = sqlite_path(uri)
    return path_under(database.parent / "mlartifacts", experiment).as_uri() if database else None


def _check_writable(uri: str, folder: Path) -> None:
    try:  # a real write: permission bits say nothing for root or on a read-only mount
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError:
        raise ConfigError(
            f"tracking store {uri} cannot be written: {folder} is missing or read-only; "
            "pass --tracking-uri with a writable path or a server URL"
        ) from None


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


def credentials_env() -> dict[str, str]:
    """The login variables that are set here (``CREDENTIAL_ENV``), for a worker that does not
    inherit this process's environment (a Ray task). Never to be logged or printed."""
    return {key: os.environ[key] for key in CREDENTIAL_ENV if os.environ.get(key)}


@contextlib.contextmanager
def logged_in(login: dict[str, str]) -> Iterator[None]:
    """Requests to the tracking server log in with ``login`` (``credentials_env`` of the process
    that launched this work) while inside; the variables are as they were afterwards."""
    before = {key: os.environ.get(key) for key in login}
    os.environ.update(login)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def refusal(uri: str, error: BaseException) -> str:
    """One line for a tracking server that refused this login (HTTP 401) or this user (HTTP 403),
    naming the variables the login comes from; empty for any other error. A 403 that is MLflow's
    Host-header check is not about the login and is left to the caller."""
    code = getattr(error, "error_code", None)
    status: Any = getattr(getattr(error, "response", None), "status_code", None)  # an artifact upload's HTTPError
    code = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}.get(status, code) if code is None else code
    text = str(error)
    if code not in ("UNAUTHENTICATED", "PERMISSION_DENIED") or "Invalid Host header" in text:
        return ""
    user = os.environ.get(USERNAME_ENV)
    if code == "UNAUTHENTICATED":
        given = (
            f"user {user!r} from {USERNAME_ENV}, password from {PASSWORD_ENV}"
            if user and os.environ.get(PASSWORD_ENV)
            else f"user {user!r} from {USERNAME_ENV}, no {PASSWORD_ENV}"
            if user
            else f"none given: {USERNAME_ENV} and {PASSWORD_ENV} are not set"
        )
        return (
            f"tracking server {uri} refused the credentials ({given}); set both to a user the server "
            "knows (see docs/distributed.md)"
        )
    endpoint = re.search(r"(?:endpoint|for url:) (?:https?://[^/\s]+)?(\S+)", text)
    what = f" ({endpoint.group(1)})" if endpoint else ""
    return (
        f"tracking server {uri} refused user {user or '(none)'!r} permission for this request{what}; ask "
        f"its admin for EDIT on the experiment, or use an --experiment of your own; the user comes from "
        f"{USERNAME_ENV} / {PASSWORD_ENV}"
    )


@contextlib.contextmanager
def login_must_be_taken(uri: str) -> Iterator[None]:
    """A refused login inside (``refusal``) becomes one ``ConfigError`` line; other errors pass."""
    try:
        yield
    except Exception as error:
        refused = refusal(uri, error)
        if refused:
            raise ConfigError(refused) from None
        raise


def error_line(error: BaseException) -> str:
    """The first line of an error's message (SQL errors go on with the statement), or its type."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def open_client(uri: str | None = None, probe: bool = True):
    """An ``MlflowClient`` on a store that is known to answer; ``ConfigError`` if it does not.
    ``probe=False``: the caller's own first request, under ``store_must_answer``, is the probe."""
    from mlflow.tracking import MlflowClient

    quiet_mlflow()

    uri = check_tracking_uri(resolve_tracking_uri(uri))
    database = sqlite_path(uri)
    if database:
        _check_writable(uri, database.parent)
        # The first request creates or migrates the database; two commands doing so at once on a
        # fresh folder collide in alembic, so that request is made under a lock beside the file.
        wait_while_database_locked(database, uri)  # before the file lock: others then name the real holder
        # MLflow's SQL store module takes over a second to import: not while holding the lock
        # every other command opening this store waits on.
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401

        with creating_store(database, uri), store_must_answer(uri):
            _forget_interrupted_creation(uri, database)
            if not database.exists():
                _create_sqlite_store(database)
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


def _create_sqlite_store(database: Path) -> None:
    """Create and migrate a new SQLite store under a temporary name, then rename it into place:
    a creation cut short (a full disk, a kill) leaves no store rather than a half-migrated one."""
    from mlflow.tracking import MlflowClient

    global _being_created
    # A new name each time: MLflow keeps a store per URI, whose connections would outlive a failed try.
    temporary = _being_created = database.with_name(f".{database.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.creating")
    client = None
    try:
        client = MlflowClient(tracking_uri=f"sqlite:///{temporary}")
        client.search_experiments(max_results=1)
        _let_go(client)  # its connections would otherwise keep the renamed file open
        os.replace(temporary, database)
    finally:
        if client is not None:
            _let_go(client)
        discard_store_being_created()


def _let_go(client: Any) -> None:
    engine = getattr(getattr(client._tracking_client, "store", None), "engine", None)
    if engine is not None:
        engine.dispose()


_being_created: Path | None = None  # the temporary file of a store this process is creating


def discard_store_being_created() -> None:
    """Delete the temporary files of a store this process is creating (for a process told to end
    at once: what it leaves is then only ever a whole store or none)."""
    if _being_created is not None:
        for leftover in (_being_created, _being_created.with_name(_being_created.name + "-journal")):
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)


def _forget_interrupted_creation(uri: str, database: Path) -> None:
    """A store whose creation was cut short by an earlier version (alembic's temporary tables are
    still there) is deleted if it holds no run, so that it is created afresh; with runs, one line."""
    import sqlite3

    for leftover in database.parent.glob(f".{database.name}.*.creating*"):  # a creation killed outright
        with contextlib.suppress(OSError):
            leftover.unlink()
    if not database.is_file() or database.stat().st_size == 0:
        return
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as connection:
            tables = {row[0] for row in connection.execute("select name from sqlite_master where type = 'table'")}
            if not any(name.startswith("_alembic_tmp_") for name in tables):
                return
            runs = connection.execute("select count(*) from runs").fetchone()[0] if "runs" in tables else 0
    except sqlite3.Error:
        return  # not a database we can read: MLflow says what is wrong with it
    if runs:
        raise ConfigError(
            f"tracking store {uri} was left half-migrated by an interrupted command and holds "
            f"{runs} run(s); restore it from a copy or move it away"
        )
    database.unlink()


@contextlib.contextmanager
def creating_store(database: Path, uri: str) -> Iterator[None]:
    """An exclusive lock on ``<database>.lock``, held while this process creates (or migrates, or
    merely opens) a SQLite store, so any number of commands may start together on one folder.
    A wait longer than a second is said in one line (a ``RunWarning``), naming who holds it."""
    import warnings

    from filelock import FileLock, Timeout

    from initmem_core.errors import RunWarning

    lock = FileLock(f"{database}.lock")
    try:
        lock.acquire(timeout=LOCK_PATIENCE_S)
    except Timeout:
        holder = lock_holder(Path(lock.lock_file))
        held = f", held by {holder}" if holder else ""
        warnings.warn(
            f"waiting for {lock.lock_file}{held}: it guards tracking store {uri} while a command "
            "creates or opens it; Ctrl-C stops",
            RunWarning,
            stacklevel=3,
        )
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def wait_while_database_locked(database: Path, uri: str) -> None:
    """Return once SQLite ``database`` would take a write. Another process inside a long
    transaction (a sync, a script, a sweep writing a large batch) would otherwise hold MLflow's
    first write in SQLite's busy wait, silently, and end it as "database is locked"; here a wait
    longer than a second is said in one line naming the holder, and it lasts until the lock is
    free: interrupting it (Ctrl-C, SIGTERM) leaves nothing behind, since nothing was written yet."""
    import sqlite3
    import time
    import warnings

    from initmem_core.errors import RunWarning

    if not database.is_file():
        return
    said, started = False, time.monotonic()
    while True:
        try:
            with contextlib.closing(sqlite3.connect(database, timeout=0, isolation_level=None)) as connection:
                connection.execute("BEGIN IMMEDIATE")  # a write lock, released at once: no one else writes
                connection.execute("ROLLBACK")
            return
        except sqlite3.Error as error:
            if "locked" not in str(error) and "busy" not in str(error):
                return  # not a lock: MLflow's own request says what is wrong with the file
        if not said and time.monotonic() - started >= LOCK_PATIENCE_S:
            holder = lock_holder(database, kinds=("POSIX", "OFDLCK"))
            held = f" by {holder}" if holder else " by another process"
            warnings.warn(
                f"waiting for tracking store {uri}: its database is locked{held}, inside a write; Ctrl-C stops",
                RunWarning,
                stacklevel=3,
            )
            said = True
        time.sleep(0.1)


def lock_holder(path: Path, kinds: tuple[str, ...] = ("FLOCK",)) -> str:
    """``process N (its command line)``, another process holding a lock of one of ``kinds`` on
    ``path``, from Linux's /proc/locks; empty if not known."""
    try:
        inode = path.stat().st_ino
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if (
                len(fields) > 5
                and fields[1] in kinds
                and fields[5].rsplit(":", 1)[-1] == str(inode)
                and fields[4] not in ("-1", str(os.getpid()))
            ):
                pid = int(fields[4])
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                return f"process {pid} ({command.strip()[:80]})"
    except (OSError, ValueError):
        pass
    return ""


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


def log_in_batches(
    client: Any, run_id: str, kind: str, entities: Sequence[Any], taken: Callable[[int], None] | None = None
) -> None:
    """Log ``entities`` (MLflow ``Metric``, ``Param`` or ``RunTag`` objects; ``kind`` is
    ``metrics``, ``params`` or ``tags``) in as few ``log_batch`` calls as MLflow's limits allow.
    ``taken(count)`` is called after each call the store accepted, so a caller can drop what was
    written and never send it twice after a failure half-way."""
    limit = BATCH_LIMITS[kind]
    for start in range(0, len(entities), limit):
        chunk = entities[start : start + limit]
        client.log_batch(run_id, **{kind: list(chunk)})
        if taken is not None:
            taken(len(chunk))


def to_json(data: Any) -> str:
    import json

    return json.dumps(data, indent=2, sort_keys=True, default=str)
