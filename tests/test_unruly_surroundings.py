"""Nothing lost when the disk, a lock or the terminal misbehaves (issue 23): output into a closed
pipe, a full checkpoint disk, signals at every moment of a run, concurrent or blocked syncs, and
a store and spool that both refuse writes.

The whole-process cases start the real CLI (``python -m initmem_cli``) and are in the slow suite.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from initmem_cli.output import BROKEN_PIPE_EXIT, PipeSafeStream

TINY_ARGS = ["--epochs", "2", "--train-size", "128", "--batch-size", "32", "--threads", "1", "--eval-batch-size", "512"]


def initmem_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "initmem_cli", *args]


def runs_in(uri: str) -> list[tuple[str, str]]:
    """(name, status) of every run in a SQLite store, read without MLflow."""
    import sqlite3

    with sqlite3.connect(uri[len("sqlite:///") :]) as database:
        return database.execute("select name, status from runs").fetchall()


# -- F: output into a closed pipe ----------------------------------------------------------------


class ClosedPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    flush = write


def test_a_stream_whose_reader_left_drops_the_rest_and_remembers_it():
    stream = PipeSafeStream(ClosedPipe())
    assert stream.write("a line\n") == len("a line\n") and stream.broken
    stream.write("more")  # never raises again
    stream.flush()
    assert PipeSafeStream(io.StringIO()).broken is False


@pytest.mark.slow
def test_a_run_piped_into_head_lands_and_exits_like_a_unix_tool(tmp_path, tracking_uri):
    uri = tracking_uri
    process = subprocess.Popen(
        initmem_command("run", *TINY_ARGS, "--tracking-uri", uri),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = process.stdout.readline()  # what `| head -1` reads, then it leaves
    process.stdout.close()
    error = process.stderr.read()
    assert process.wait(timeout=120) in (0, BROKEN_PIPE_EXIT)
    assert first.strip() == "resnet20-sgd-s1.0-seed0" and error == "", error
    assert runs_in(uri) == [("resnet20-sgd-s1.0-seed0", "FINISHED")]


@pytest.mark.slow
def test_a_run_with_stdout_closed_lands_without_a_traceback(tmp_path, tracking_uri):
    uri = tracking_uri
    done = subprocess.run(
        initmem_command("run", *TINY_ARGS, "--tracking-uri", uri),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.close(1),
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert runs_in(uri) == [("resnet20-sgd-s1.0-seed0", "FINISHED")]


# -- H: a full checkpoint disk -------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk("3m")``: a folder on a tmpfs of that size (root only; skips elsewhere), with
    ``.resize(size)`` to free space; unmounted after the test."""
    mounted = []

    class Disk(type(tmp_path)):
        def resize(self, size: str) -> None:
            subprocess.run(["mount", "-o", f"remount,size={size}", str(self)], check=True)

    def make(size: str) -> Path:
        folder = Disk(tmp_path / f"disk{len(mounted)}")
        folder.mkdir()
        if (
            os.geteuid() != 0
            or subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
            ).returncode
            != 0
        ):
            pytest.skip("needs root and tmpfs to make a full disk")
        mounted.append(folder)
        return folder

    yield make
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def new_file(path: Path) -> Path:
    """``path`` created empty. A tmpfs mounted a moment ago can refuse a new name with ENOSPC
    for a while on this machine's kernel (seen with 550k free, after an earlier full tmpfs):
    retried, so that the full disk a test makes is the one it means."""
    import time

    for attempt in range(100):
        try:
            path.touch()
            return path
        except OSError as error:
            if error.errno != 28 or attempt == 99:
                raise
            time.sleep(0.1)
    return path


def fill_up(filler, patience_s: float = 1.0) -> None:
    """Write into the unbuffered ``filler`` until its disk takes nothing more: a refusal (ENOSPC)
    must last ``patience_s``, since this kernel's tmpfs can refuse for a moment with room left."""
    import errno
    import time

    chunk, refused_since = b"x" * 65536, None
    while True:
        try:
            filler.write(chunk)
            refused_since = None
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            if len(chunk) > 4096:  # the last pages, one at a time
                chunk = chunk[:4096]
                continue
            now = time.monotonic()
            refused_since = refused_since or now
            if now - refused_since >= patience_s:
                return
            time.sleep(0.05)


def test_a_checkpoint_the_disk_refuses_names_its_path_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    import errno

    import torch

    from initmem_core.training import checkpoint_store
    from initmem_core.training.checkpoint_format import FORMAT
    from initmem_core.training.checkpoint_store import CheckpointNotWritten, CheckpointStore

    def payload(epoch):
        return {
            "format": FORMAT,
            "config": {},
            "config_hash": "abc",
            "run_id": None,
            "epoch": epoch,
            "step": 0,
            "model": {"w": torch.ones(2)},
            "optimizer": {},
            "scheduler": {},
        }

    store = CheckpointStore(tmp_path)
    first = store.save(payload(1))
    store.wait()

    def full_disk(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_store.os, "fsync", full_disk)
    store.save(payload(2))
    with pytest.raises(CheckpointNotWritten) as refused:
        store.wait()
    assert (
        str(refused.value)
        == f"checkpoint {tmp_path / 'ckpt-e000002-s000000.pt'} could not be written: No space left on device"
    )
    assert refused.value.last_good == first and f"--resume continues from {first}" in refused.value.how_to_continue()
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]  # no .tmp, the good one kept


@pytest.mark.slow
def test_a_full_checkpoint_disk_fails_the_run_in_one_line_and_resume_completes_it(tmp_path, tracking_uri, small_disk):
    disk = small_disk("3m")  # two checkpoints of this model fit, not three
    command = initmem_command(
        "run", *TINY_ARGS, "--epochs", "4", "--tracking-uri", tracking_uri, "--checkpoint-dir", str(disk)
    )
    failed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and failed.stderr.count("\n") == 1, failed.stderr
    assert "could not be written: No space left on device" in failed.stderr and str(disk) in failed.stderr
    assert "the run is marked FAILED" in failed.stderr and "--resume continues from" in failed.stderr
    assert not list(disk.rglob("*.tmp"))
    assert runs_in(tracking_uri) == [("resnet20-sgd-s1.0-seed0", "FAILED")]

    disk.resize("8m")
    resumed = subprocess.run(command + ["--resume"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    (run,) = client.search_runs(client.get_experiment_by_name("initmem").experiment_id)
    assert run.info.status == "FINISHED" and "best_val_test_acc" in run.data.metrics
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "test_acc")) == [0, 1, 2, 3, 4]


# -- D: signals at every moment ------------------------------------------------------------------


def folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time."""
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in folder.rglob("*")
        if path.is_file()
    }


TRAINING = "training"  # the moment: once the run has begun training (its label is printed)


@pytest.mark.slow
@pytest.mark.parametrize(
    "signal_name, moment, store",
    [
        ("SIGINT", 0.2, "copied"),
        ("SIGINT", 2.0, "copied"),
        ("SIGTERM", 1.5, "copied"),
        ("SIGTERM", 3.0, "fresh"),
        ("SIGHUP", 2.5, "copied"),
        ("SIGINT", TRAINING, "copied"),
        ("SIGHUP", TRAINING, "copied"),
    ],
)  # (SIGTERM during training: test_resume.py) benchmarks/signal_moments.py tries many more moments
def test_a_signal_at_any_moment_ends_the_command_in_one_line_and_leaves_nothing_running(
    tmp_path, store_in, signal_name, moment, store
):
    import signal
    import time

    from test_reliability_edges import alive, descendants

    uri = store_in(tmp_path) if store == "copied" else f"sqlite:///{tmp_path / 'mlflow.db'}"
    signum = getattr(signal, signal_name)
    args = ["--epochs", "6", "--train-size", "256", "--batch-size", "32", "--threads", "1", "--eval-batch-size", "512"]
    process = subprocess.Popen(
        initmem_command("run", *args, "--tracking-uri", uri),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if moment == TRAINING:
        assert process.stdout.readline().strip() == "resnet20-sgd-s1.0-seed0"  # printed as training starts
        time.sleep(0.3)
    else:
        time.sleep(moment)
    helpers = descendants(process.pid)
    process.send_signal(signum)
    sent = time.monotonic()
    error = process.stderr.read()
    code = process.wait(timeout=30)
    took = time.monotonic() - sent
    left = folder_state(tmp_path)

    assert code == 128 + signum and took < 2.0, (code, took, error)
    assert error.count("\n") == 1 and f"stopped by {signal_name}" in error and "Traceback" not in error, error
    while any(alive(pid) for pid in helpers) and time.monotonic() - sent < took + 2.0:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in helpers)
    time.sleep(0.5)
    assert folder_state(tmp_path) == left  # nothing created or written after the command exited
    assert not [name for name in left if name.endswith((".tmp", ".creating", "-journal"))]
    runs = runs_in(uri) if (tmp_path / "mlflow.db").exists() else []
    assert all(status == "KILLED" for _, status in runs), runs
    if moment == TRAINING:
        assert len(runs) == 1 and "the run is marked KILLED" in error and "--resume" in error


# -- I: syncs at once, a file whose run is gone, long names, tags of an early end ----------------


def unsynced_run(uri: str, folder: Path, name: str, in_store: bool = True) -> str:
    """A run (in the store, or only named) whose three metric values wait in ``folder``."""
    from mlflow.tracking import MlflowClient

    from initmem_core.tracking.pending import PendingWrites, spill

    if in_store:
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("Default").experiment_id
        run_id = client.create_run(experiment, run_name=name).info.run_id
    else:
        run_id = "0123456789abcdef0123456789abcdef"
    spill(
        PendingWrites(metrics=[("test_acc", 0.5 + step / 10, 0, step) for step in range(3)], status=("FINISHED", 0)),
        folder,
        run_id,
        uri,
    )
    return run_id


def stored_steps(uri: str, run_id: str) -> list[int]:
    from mlflow.tracking import MlflowClient

    return sorted(m.step for m in MlflowClient(uri).get_metric_history(run_id, "test_acc"))


def test_a_file_whose_run_is_not_in_the_store_is_named_and_the_others_are_synced(tmp_path, tracking_uri):
    from typer.testing import CliRunner

    from initmem_cli.app import app

    folder = tmp_path / "initmem-unsynced"
    missing = unsynced_run(tracking_uri, folder, "gone", in_store=False)
    present = unsynced_run(tracking_uri, folder, "here")
    synced = CliRunner().invoke(app, ["sync", "--tracking-uri", tracking_uri])
    assert synced.exit_code == 1 and f"synced 1 run(s), 3 metric value(s): {present}" in synced.stdout
    assert synced.stderr.count("\n") == 1 and f"left {folder / missing}.jsonl: run {missing} is not in" in synced.stderr
    assert stored_steps(tracking_uri, present) == [0, 1, 2] and (folder / f"{missing}.jsonl").exists()


@pytest.mark.slow
def test_two_syncs_at_once_upload_every_file_once_and_both_succeed(tmp_path, tracking_uri):
    folder = tmp_path / "initmem-unsynced"
    run_ids = [unsynced_run(tracking_uri, folder, f"run{i}") for i in range(4)]
    syncs = [
        subprocess.Popen(
            initmem_command("sync", "--tracking-uri", tracking_uri),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [sync.communicate(timeout=120) for sync in syncs]
    assert [sync.returncode for sync in syncs] == [0, 0], outputs
    assert all(error == "" for _, error in outputs), outputs
    assert sum(int(out.split("synced ")[1].split()[0]) if "synced" in out else 0 for out, _ in outputs) == 4
    assert all(stored_steps(tracking_uri, run_id) == [0, 1, 2] for run_id in run_ids)
    assert not list(folder.glob("*.jsonl"))


def test_a_too_long_experiment_name_is_reported_as_what_it_is(tracking_uri):
    from typer.testing import CliRunner

    from initmem_cli.app import app

    result = CliRunner().invoke(app, ["run", "--experiment", "x" * 600, "--tracking-uri", tracking_uri])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "--experiment is 600 characters long; MLflow takes names of at most 500" in result.stderr


def test_a_resumed_run_that_finishes_loses_the_tags_of_its_early_end(tracking_uri, tmp_path):
    import signal

    from mlflow.tracking import MlflowClient
    from signal_progress import SignalAtStep

    import initmem_core
    from initmem_core import Stopped

    tiny = dict(
        epochs=2,
        train_size=64,
        batch_size=32,
        threads=1,
        eval_batch_size=512,
        helper_process=False,
        tracking_uri=tracking_uri,
        checkpoint_dir=str(tmp_path / "checkpoints"),
    )
    with pytest.raises(Stopped):
        initmem_core.run(progress=SignalAtStep(1, signal.SIGINT), **tiny)
    (run,) = MlflowClient(tracking_uri).search_runs(
        [MlflowClient(tracking_uri).get_experiment_by_name("initmem").experiment_id]
    )
    assert run.data.tags["stopped_by"] == "SIGINT" and run.info.status == "KILLED"
    result = initmem_core.run(resume=True, **tiny)
    run = MlflowClient(tracking_uri).get_run(result.run_id)
    assert run.info.status == "FINISHED" and "stopped_by" not in run.data.tags and "failure_reason" not in run.data.tags


# -- A: the store and the unsynced folder both refuse writes -------------------------------------


def test_unsynced_files_are_whole_or_absent(tmp_path, monkeypatch):
    import errno

    from initmem_core.tracking import pending as pending_module
    from initmem_core.tracking.pending import PendingWrites, keep_copy, spill

    folder = tmp_path / "initmem-unsynced"
    spill(PendingWrites(metrics=[("loss", 1.0, 0, 0)]), folder, "run1", "sqlite:///x.db")
    before = (folder / "run1.jsonl").read_text()
    weights = tmp_path / "final_weights.pt"
    weights.write_bytes(b"w" * 100_000)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pending_module.os, "fsync", full_disk)
    monkeypatch.setattr(pending_module.shutil, "copy2", full_disk)
    with pytest.raises(OSError):
        spill(PendingWrites(metrics=[("loss", 0.5, 0, 1)]), folder, "run1", "sqlite:///x.db")
    with pytest.raises(OSError):
        keep_copy(folder, "run1", weights)
    assert (folder / "run1.jsonl").read_text() == before  # the earlier writes, unchanged
    assert sorted(p.name for p in folder.rglob("*")) == ["run1.jsonl"]  # no .tmp, no half copy, no empty folder


@pytest.mark.slow
def test_a_run_whose_store_and_spool_fill_up_names_the_command_that_records_everything(
    tmp_path, small_disk, store_in, _empty_store
):
    from initmem_core.tracking.pending import read_unsynced

    disk = small_disk(f"{_empty_store.stat().st_size // 1024 + 550}k")  # the store's folder, filled up below
    with open(new_file(disk / "filler"), "wb", buffering=0) as filler:
        uri = store_in(disk)
        args = [
            "--epochs",
            "6",
            "--train-size",
            "256",
            "--batch-size",
            "32",
            "--threads",
            "1",
            "--eval-batch-size",
            "512",
            "--tracking-uri",
            uri,
            "--checkpoint-dir",
            str(tmp_path / "checkpoints"),
        ]
        process = subprocess.Popen(
            initmem_command("run", *args), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert process.stdout.readline().strip() == "resnet20-sgd-s1.0-seed0"  # the run exists, training starts
        fill_up(filler)  # while it trains
    output, error = process.communicate(timeout=120)
    assert process.returncode == 1 and "Traceback" not in error, error
    last = error.strip().splitlines()[-1]
    assert (
        last.startswith("Error: resnet20-sgd-s1.0-seed0 ended FINISHED, but tracking store") and "not recorded" in last
    )
    kept = ("mlflow.db", "mlflow.db.lock", "filler", "ac1c534c19fd9902.lock")  # the last: the run's lease
    # The disk may have had room for the spool's file but not the weights' copy: a whole file may then
    # be left (syncing it adds nothing once the run is recovered), never a temporary or partial one.
    for left in [p for p in disk.rglob("*") if p.is_file() and p.name not in kept]:
        assert left.parent.name == "initmem-unsynced" and left.suffix == ".jsonl", left
        read_unsynced(left)  # whole: it parses
    assert runs_in(uri) == [("resnet20-sgd-s1.0-seed0", "RUNNING")]

    command = last.split("once the store answers, `")[1].split("`")[0].split()
    assert command[0] == "initmem" and command[-1] == "--resume"
    (disk / "filler").unlink()
    disk.resize("8m")
    resumed = subprocess.run(initmem_command(*command[1:]), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("initmem").experiment_id])
    assert run.info.status == "FINISHED" and "best_val_test_acc" in run.data.metrics
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "test_acc")) == list(range(7))
    assert {"config.json", "final_weights.pt", "layer_norms.csv"} <= {
        a.path for a in client.list_artifacts(run.info.run_id)
    }


# -- E: the store's lock held by another process ---------------------------------------------------


def interrupt_the_wait(folder: Path, uri: str) -> str:
    """Start ``initmem run`` on ``uri``, which waits for a lock; Ctrl-C it at its first line and check
    that the command ends at once in one more line, exit 130, its helpers gone. Returns that first line."""
    import signal
    import time

    from test_reliability_edges import alive, descendants

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
    import time

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
    from mlflow.tracking import MlflowClient

    (run,) = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("initmem").experiment_id])
    assert (
        run.info.status == "FINISHED" and run.data.params["sigma"] == "1.0" and "best_val_test_acc" in run.data.metrics
    )


@pytest.mark.slow
def test_a_database_locked_after_the_store_opened_is_waited_for_before_the_run_is_created(tmp_path, store_in):
    import signal
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
    from initmem_core.errors import ConfigError
    from initmem_core.tracking.client import store_must_answer

    with pytest.raises(ConfigError) as said:
        with store_must_answer("sqlite:///x/mlflow.db"):
            raise RuntimeError("(sqlite3.OperationalError) database is locked\n[SQL: INSERT ...]")
    assert "stayed locked by another process's write" in str(said.value) and "cannot be reached" not in str(said.value)
    assert "\n" not in str(said.value)


# -- B: creating the store on a full disk, or finding one an older version left half-made -----------


@pytest.mark.slow
def test_a_store_that_cannot_be_created_leaves_nothing_and_is_created_once_there_is_space(small_disk, _empty_store):
    from initmem_core.errors import ConfigError
    from initmem_core.tracking.client import open_client

    disk = small_disk(f"{_empty_store.stat().st_size // 2048}k")  # half what a migrated store takes
    uri = f"sqlite:///{disk / 'mlflow.db'}"
    with pytest.raises(ConfigError, match=r"cannot be reached: .*(full|space)") as refused:
        open_client(uri)
    assert "\n" not in str(refused.value)
    assert sorted(p.name for p in disk.iterdir()) == ["mlflow.db.lock"]  # no half-migrated store, no temporary file
    disk.resize("4m")
    assert open_client(uri).search_experiments()[0].name == "Default"


@pytest.mark.slow
def test_a_store_an_interrupted_migration_left_is_made_afresh_when_it_holds_no_run(tmp_path, store_in):
    import sqlite3

    from initmem_core.errors import ConfigError
    from initmem_core.tracking.client import open_client

    uri = store_in(tmp_path)
    with sqlite3.connect(tmp_path / "mlflow.db") as database:  # what alembic leaves when cut short
        database.execute("create table _alembic_tmp_experiments (experiment_id integer)")
    assert open_client(uri).search_experiments()[0].name == "Default"
    with sqlite3.connect(tmp_path / "mlflow.db") as database:
        tables = {row[0] for row in database.execute("select name from sqlite_master where type = 'table'")}
    assert "_alembic_tmp_experiments" not in tables and "runs" in tables

    from mlflow.tracking import MlflowClient

    MlflowClient(uri).create_run("0")
    with sqlite3.connect(tmp_path / "mlflow.db") as database:
        database.execute("create table _alembic_tmp_experiments (experiment_id integer)")
    with pytest.raises(ConfigError, match="left half-migrated by an interrupted command and holds 1 run"):
        open_client(uri)


# -- C: one run of a config at a time ------------------------------------------------------------


@pytest.mark.slow
def test_a_live_run_holds_its_config_and_once_its_process_is_dead_it_resumes(tmp_path, tracking_uri):
    import signal

    args = [
        "run",
        "--epochs",
        "12",
        "--train-size",
        "256",
        "--batch-size",
        "32",
        "--threads",
        "1",
        "--eval-batch-size",
        "512",
        "--tracking-uri",
        tracking_uri,
    ]
    first = subprocess.Popen(
        initmem_command(*args), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert first.stdout.readline().strip() == "resnet20-sgd-s1.0-seed0"  # training
        second = subprocess.run(initmem_command(*args), cwd=tmp_path, capture_output=True, text=True, timeout=60)
        resumed_early = subprocess.run(
            initmem_command(*args, "--resume"), cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert first.poll() is None, "the first run ended before the others were tried: make it longer"
    finally:
        first.send_signal(signal.SIGKILL)  # its owner dies outright: the run stays RUNNING
        first.wait()
    assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
    assert f"resnet20-sgd-s1.0-seed0 is already running in process {first.pid}" in second.stderr
    assert resumed_early.returncode == 2 and resumed_early.stderr.count("\n") == 1, resumed_early.stderr
    assert f"the run of this config is still running in process {first.pid}" in resumed_early.stderr
    assert runs_in(tracking_uri) == [("resnet20-sgd-s1.0-seed0", "RUNNING")]  # neither wrote a run

    resumed = subprocess.run(
        initmem_command(*args, "--resume"), cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    assert runs_in(tracking_uri) == [("resnet20-sgd-s1.0-seed0", "FINISHED")]


# -- G: a sweep whose store does not take a cell's writes ----------------------------------------


@pytest.mark.slow
def test_a_sweep_counts_the_cells_whose_writes_wait_and_names_initmem_sync(tracking_uri, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from typer.testing import CliRunner

    from initmem_cli.app import app
    from initmem_core.tracking.pending import PendingWrites

    send, refused = PendingWrites.send, []

    def locked_for_one_cell(self, client, run_id):
        if not refused:
            refused.append(run_id)
        if run_id == refused[0]:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        send(self, client, run_id)

    monkeypatch.setattr(PendingWrites, "send", locked_for_one_cell)
    swept = CliRunner(env={"COLUMNS": "250"}).invoke(
        app,
        [
            "sweep",
            *TINY_ARGS,
            "--epochs",
            "1",
            "--sigma",
            "0.5,2",
            "--name",
            "locked",
            "--tracking-uri",
            tracking_uri,
            "--out",
            str(tmp_path / "out"),
        ],
    )
    monkeypatch.undo()
    assert swept.exit_code == 0, swept.output
    said = " ".join(swept.stdout.split())  # as one line, however rich wrapped it
    assert "1 cell(s) (" in said and "seed 0) ended with writes the store did not take" in said
    assert f"run `initmem sync --tracking-uri {tracking_uri}`, then `initmem report locked" in said
    assert "Traceback" not in swept.output
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("initmem").experiment_id])
    (parent,) = [run for run in runs if run.data.tags.get("initmem.role") == "parent"]
    assert parent.data.tags["initmem.cells_unsynced"] == "1"
    assert client.get_run(refused[0]).info.status == "RUNNING"
    synced = CliRunner().invoke(app, ["sync", "--tracking-uri", tracking_uri])
    assert synced.exit_code == 0 and client.get_run(refused[0]).info.status == "FINISHED", synced.output
    assert client.get_run(parent.info.run_id).data.tags["initmem.cells_unsynced"] == "0"  # the parent says so too


def test_mlflow_error_logs_become_one_line(caplog):
    import logging

    from initmem_core.tracking.mlflow_logs import OneLineLogs

    one_line = OneLineLogs()
    try:
        raise ValueError("first line\nsecond line")
    except ValueError:
        import sys as system

        caught = system.exc_info()
    database = logging.LogRecord("mlflow.store.db.utils", logging.ERROR, "", 0, "SQLAlchemy error.\n%s", ("x",), caught)
    other = logging.LogRecord("mlflow.tracking", logging.ERROR, "", 0, "failed: %s", ("one\ntwo",), caught)
    assert one_line.filter(database) is False  # the caller reports it itself
    assert one_line.filter(other) is True and other.getMessage() == "failed: one" and other.exc_info is None


def test_a_run_whose_process_died_resumes_whatever_a_later_run_of_its_config_did(tracking_uri, tmp_path):
    import signal

    from mlflow.tracking import MlflowClient
    from signal_progress import SignalAtStep

    import initmem_core
    from initmem_core import Stopped
    from initmem_core.errors import RunWarning

    tiny = dict(
        epochs=2,
        train_size=64,
        batch_size=32,
        threads=1,
        eval_batch_size=512,
        helper_process=False,
        tracking_uri=tracking_uri,
        checkpoint_dir=str(tmp_path / "checkpoints"),
    )
    with pytest.raises(Stopped):
        initmem_core.run(progress=SignalAtStep(3, signal.SIGTERM), **tiny)  # 2 steps an epoch: stops in epoch 2
    client = MlflowClient(tracking_uri)
    (first,) = client.search_runs([client.get_experiment_by_name("initmem").experiment_id])
    with pytest.warns(RunWarning, match="unfinished run"):
        later = initmem_core.run(**tiny)  # the same config again, to the end
    resumed = initmem_core.run(resume=True, **tiny)
    assert resumed.run_id == first.info.run_id != later.run_id
    assert client.get_run(first.info.run_id).info.status == client.get_run(later.run_id).info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(first.info.run_id, "test_acc")) == [0, 1, 2]
