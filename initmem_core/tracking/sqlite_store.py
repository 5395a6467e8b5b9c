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
