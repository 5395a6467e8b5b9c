"""A SQLite tracking store: created whole or not at all, and opened under locks, so that any
number of commands may start together on one folder and a wait on another process is said in
one line naming it (``locks.lock_holder``)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from initmem_core.errors import ConfigError, RunWarning
from initmem_core.tracking.locks import LOCK_PATIENCE_S, lock_holder


def create_sqlite_store(database: Path) -> None:
    """Create and migrate a new SQLite store under a temporary name, then rename it into place:
    a creation cut short (a full disk, a kill) leaves no store rather than a half-migrated one.

    MLflow builds a new database by running its whole migration history (about 2 s of CPU); the
    first store this MLflow version creates is kept as a template (``store_template``), and later
    ones are a copy of it with the one row that depends on where they are created written as MLflow
    writes it (the Default experiment's artifact location and time)."""
    global _being_created
    # A new name each time: MLflow keeps a store per URI, whose connections would outlive a failed try.
    temporary = _being_created = database.with_name(f".{database.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.creating")
    try:
        if not _copy_template(temporary):
            _open_with_mlflow(temporary)  # a new file: MLflow runs its whole migration history
            _keep_as_template(temporary)
        os.replace(temporary, database)
    finally:
        discard_store_being_created()


def store_template() -> Path:
    """Where this MLflow version's empty, migrated SQLite store is kept (in the user's cache)."""
    import sqlite3

    from mlflow.version import VERSION

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path(os.path.expanduser("~")) / ".cache")
    return cache / "initmem" / "store-templates" / f"mlflow-{VERSION}-sqlite-{sqlite3.sqlite_version}.db"


def _open_with_mlflow(database: Path) -> None:
    """Open ``database`` as MLflow does (migrating a new file, checking an existing one's schema
    revision against this MLflow's), then let go of it."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{database}")
    try:
        client.search_experiments(max_results=1)
    finally:
        _let_go(client)  # its connections would otherwise keep the renamed file open


def _default_experiment_location() -> str:
    """The Default experiment's artifact location as MLflow writes it into a new store created here
    (``_get_sqlalchemy_store`` and ``SqlAlchemyStore._get_artifact_location``): it depends on the
    working folder. It reads a private MLflow name: an ``ImportError`` in a release without it
    (``_copy_template`` then falls back to MLflow's own migration)."""
    from mlflow.store.tracking import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking._tracking_service.utils import _SERVER_ARTIFACT_ROOT_ENV_VAR
    from mlflow.utils.uri import append_to_uri_path, resolve_uri_if_local

    root = os.environ.get(_SERVER_ARTIFACT_ROOT_ENV_VAR, DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
    return str(append_to_uri_path(resolve_uri_if_local(root), SqlAlchemyStore.DEFAULT_EXPERIMENT_ID))


def _mlflow_schema_revision() -> str:
    """The schema revision this MLflow migrates a new store to, and checks every store it opens
    against: the one head of its alembic scripts (``ValueError`` if they have several)."""
    import mlflow.store
    from alembic.script import ScriptDirectory

    [head] = ScriptDirectory(str(Path(mlflow.store.__file__).parent / "db_migrations")).get_heads()
    return head


def _check_empty_mlflow_store(connection: Any) -> None:
    """``sqlite3.DatabaseError`` unless the template is an empty store at this MLflow's schema
    revision, holding no run (anything else is a file this MLflow did not leave here)."""
    import sqlite3

    tables = {row[0] for row in connection.execute("select name from sqlite_master where type = 'table'")}
    if not {"alembic_version", "experiments", "runs"} <= tables:
        raise sqlite3.DatabaseError("the template is not an MLflow store")
    revisions = [row[0] for row in connection.execute("select version_num from alembic_version")]
    if revisions != [_mlflow_schema_revision()]:
        raise sqlite3.DatabaseError(f"the template is at schema revision {revisions}, not this MLflow's")
    if connection.execute("select count(*) from runs").fetchone()[0]:
        raise sqlite3.DatabaseError("the template holds runs")


def _copy_template(temporary: Path) -> bool:
    """A new store at ``temporary`` copied from the template; False (nothing left) if there is none
    or it cannot be used (unreadable, damaged, not an empty store at this MLflow's schema
    revision, or an MLflow without the private name the Default experiment's row needs),
    and the store is then migrated as MLflow does it."""
    import shutil
    import sqlite3
    import time

    from alembic.util.exc import CommandError as AlembicError  # its scripts not where they were

    template = store_template()
    if not template.is_file():
        return False
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        location = _default_experiment_location()
        shutil.copyfile(template, temporary)
        now = int(time.time() * 1000)
        with contextlib.closing(sqlite3.connect(temporary)) as connection, connection:
            _check_empty_mlflow_store(connection)
            changed = connection.execute(
                "update experiments set artifact_location = ?, creation_time = ?, last_update_time = ? "
                "where experiment_id = ?",
                (location, now, now, int(SqlAlchemyStore.DEFAULT_EXPERIMENT_ID)),
            ).rowcount
        if changed != 1:
            raise sqlite3.DatabaseError("the template has no Default experiment")
        return True
    except (ImportError, AttributeError, ValueError, OSError, sqlite3.Error, AlembicError):
        discard_store_being_created()  # ``temporary`` is the store being created
        return False


def _keep_as_template(store: Path) -> None:
    """Copy a just-migrated, still empty store into the cache; a cache that cannot be written only
    means the next store is migrated again."""
    import shutil

    template = store_template()
    partial = template.with_name(f".{template.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(store, partial)
        os.replace(partial, template)  # whole or not at all, whoever else is creating one
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def _let_go(client: Any) -> None:
    """Close the connections MLflow keeps to the store (MLflow has no public call for it: its
    client's private ``_tracking_client``; tests/core/tracking/test_store_creation.py checks none stay open)."""
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    engine = getattr(store, "engine", None)
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


def forget_interrupted_creation(uri: str, database: Path) -> None:
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
