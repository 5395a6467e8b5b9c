"""The tracking store's locks (tracking/locks.py, tracking/client.py): a held store lock or a locked
SQLite database named in one line, the first Ctrl-C ending the wait, a database locked after the
store opened, SQLite's busy wait, and a fresh store opened by two sweeps at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from initmem_core.errors import ConfigError
from tests.support.cli_processes import TINY_RUN_ARGS as TINY_ARGS
from tests.support.cli_processes import alive, children, descendants, initmem_command, only_run, runs_in, sweep_command


def interrupt_the_wait(folder: Path, uri: str) -> str:
    """Start ``initmem run`` on ``uri``, which waits for a lock; Ctrl-C it at its first line and check
    that the command ends at once in one more line, exit 130, its helpers gone. Returns that first line."""
    import time

    process = subprocess.Popen(
        initmem_command("run", *TINY_ARGS, "--tracking-uri", uri),
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    waiting = process.stderr.readline()
    helpers = descendants(process.pid)
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    rest = process.stderr.read()
    assert process.wait(timeout=30) == 130 and time.monotonic() - sent < 2.0
    assert rest.count("\n") == 1 and "stopped by SIGINT before the run was tracked" in rest, rest
    assert not any(alive(pid) for pid in helpers)
    return waiting


@pytest.mark.slow
def test_a_held_store_lock_is_named_in_one_line_and_the_first_ctrl_c_ends_the_wait(tmp_path, store_in):

    from filelock import FileLock

    uri = store_in(tmp_path)
    holder = FileLock(str(tmp_path / "mlflow.db.lock"))
    holder.acquire()
    try:
        waiting = interrupt_the_wait(tmp_path, uri)
        assert waiting.startswith("Warning: waiting for") and f"held by process {os.getpid()}" in waiting, waiting
    finally:
        holder.release()
    time.sleep(1.0)
    assert runs_in(uri) == []  # nothing was created once the lock was free


def hold_database(database: Path, seconds: float) -> subprocess.Popen:
    """Another process inside an exclusive SQLite transaction on ``database`` for ``seconds``;
    returns once it holds the lock."""
    script = (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('held', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "c.execute('COMMIT')\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(database), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.slow
def test_a_locked_database_is_named_in_one_line_the_first_ctrl_c_ends_the_wait_and_a_freed_one_is_written(
    tmp_path, store_in
):
    uri = store_in(tmp_path)
    holder = hold_database(tmp_path / "mlflow.db", 60)
    try:
        waiting = interrupt_the_wait(tmp_path, uri)
        assert waiting.startswith("Warning: waiting for tracking store") and "its database is locked" in waiting
        assert f"by process {holder.pid}" in waiting, waiting  # who holds it, from /proc/locks
    finally:
        holder.kill()
        holder.wait()
    assert runs_in(uri) == []

    holder = hold_database(tmp_path / "mlflow.db", 60)  # let go once the run has said it waits: it then lands whole
    process = subprocess.Popen(
        initmem_command("run", *TINY_ARGS, "--tracking-uri", uri),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    waiting = process.stderr.readline()
    holder.kill()
    holder.wait()
    output, error = process.communicate(timeout=120)
    assert process.returncode == 0, error
    assert "its database is locked" in waiting and "its database is locked" not in error and "Traceback" not in error
    run = only_run(uri)
    assert (
        run.info.status == "FINISHED" and run.data.params["sigma"] == "1.0" and "best_val_test_acc" in run.data.metrics
    )


@pytest.mark.slow
def test_a_database_locked_after_the_store_opened_is_waited_for_before_the_run_is_created(tmp_path, store_in):
    import time

    from initmem_core.errors import ConfigError, RunWarning
    from initmem_core.tracking.tracker import MlflowTracker
    from initmem_core.tracking.tracker_process import OpeningAbandoned, TrackerProcess

    uri = store_in(tmp_path)
    tracker = MlflowTracker(uri)  # in this process: start_run waits, said in one line, then writes run and params
    holder = hold_database(tmp_path / "mlflow.db", 2)
    with pytest.warns(RunWarning, match=f"its database is locked by process {holder.pid}"):
        run_id = tracker.start_run("waited", {"sigma": 2.0}, {})
    holder.wait()
    assert tracker.client.get_run(run_id).data.params == {"sigma": "2.0"}

    helper = TrackerProcess(uri)  # in the helper: the wait comes before it begins, so a signal ends it at once
    with pytest.raises(ConfigError):
        helper.resume_run("0" * 32)  # answered: the helper has opened the store
    holder = hold_database(tmp_path / "mlflow.db", 60)
    try:
        asked = time.monotonic()
        helper.give_up_opening = lambda: signal.SIGINT if time.monotonic() - asked > 2.0 else None
        with pytest.warns(RunWarning, match="its database is locked"), pytest.raises(OpeningAbandoned):
            helper.start_run("abandoned", {"sigma": 1.0}, {})
        assert time.monotonic() - asked < 4.0  # not SQLite's 20 s busy wait
    finally:
        holder.kill()
        holder.wait()
    assert [name for name, _ in runs_in(uri)] == ["waited"]


def test_a_database_whose_lock_outlasts_sqlites_wait_is_said_to_be_busy_not_unreachable():
    from initmem_core.tracking.client import store_must_answer

    with pytest.raises(ConfigError) as said:
        with store_must_answer("sqlite:///x/mlflow.db"):
            raise RuntimeError("(sqlite3.OperationalError) database is locked\n[SQL: INSERT ...]")
    assert "stayed locked by another process's write" in str(said.value) and "cannot be reached" not in str(said.value)
    assert "\n" not in str(said.value)


@pytest.mark.slow(seconds=13)
def test_two_sweeps_started_together_on_an_empty_folder_both_finish(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # Different cells: two sweeps on one cell would rightly leave it to whichever leased it first.
    processes = [
        subprocess.Popen(
            sweep_command(uri, f"together-{i}", "--sigma", str(i + 1), "--seed", "0", "--out", str(tmp_path / str(i))),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [process.communicate(timeout=600)[0] for process in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0 and "Traceback" not in output, output
    assert {run.info.status for i in range(2) for run in children(uri, f"together-{i}")} == {"FINISHED"}
