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

TINY_ARGS = ["--epochs", "2", "--train-size", "128", "--batch-size", "32", "--threads", "1",
             "--eval-batch-size", "512"]


def initmem_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "initmem_cli", *args]


def runs_in(uri: str) -> list[tuple[str, str]]:
    """(name, status) of every run in a SQLite store, read without MLflow."""
    import sqlite3

    with sqlite3.connect(uri[len("sqlite:///"):]) as database:
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
    process = subprocess.Popen(initmem_command("run", *TINY_ARGS, "--tracking-uri", uri), cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = process.stdout.readline()  # what `| head -1` reads, then it leaves
    process.stdout.close()
    error = process.stderr.read()
    assert process.wait(timeout=120) in (0, BROKEN_PIPE_EXIT)
    assert first.strip() == "resnet20-sgd-s1.0-seed0" and error == "", error
    assert runs_in(uri) == [("resnet20-sgd-s1.0-seed0", "FINISHED")]


@pytest.mark.slow
def test_a_run_with_stdout_closed_lands_without_a_traceback(tmp_path, tracking_uri):
    uri = tracking_uri
    done = subprocess.run(initmem_command("run", *TINY_ARGS, "--tracking-uri", uri), cwd=tmp_path,
                          stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1), timeout=120)
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
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                                               capture_output=True).returncode != 0:
            pytest.skip("needs root and tmpfs to make a full disk")
        mounted.append(folder)
        return folder

    yield make
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_checkpoint_the_disk_refuses_names_its_path_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    import errno

    import torch

    from initmem_core.training import checkpoints
    from initmem_core.training.checkpoints import FORMAT, CheckpointNotWritten, CheckpointStore

    def payload(epoch):
        return {"format": FORMAT, "config": {}, "config_hash": "abc", "run_id": None, "epoch": epoch, "step": 0,
                "model": {"w": torch.ones(2)}, "optimizer": {}, "scheduler": {}}

    store = CheckpointStore(tmp_path)
    first = store.save(payload(1))
    store.wait()

    def full_disk(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoints.os, "fsync", full_disk)
    store.save(payload(2))
    with pytest.raises(CheckpointNotWritten) as refused:
        store.wait()
    assert str(refused.value) == f"checkpoint {tmp_path / 'ckpt-e000002-s000000.pt'} could not be written: No space left on device"
    assert refused.value.last_good == first and f"--resume continues from {first}" in refused.value.how_to_continue()
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]  # no .tmp, the good one kept


@pytest.mark.slow
def test_a_full_checkpoint_disk_fails_the_run_in_one_line_and_resume_completes_it(tmp_path, tracking_uri, small_disk):
    disk = small_disk("3m")  # two checkpoints of this model fit, not three
    command = initmem_command("run", *TINY_ARGS, "--epochs", "4", "--tracking-uri", tracking_uri,
                              "--checkpoint-dir", str(disk))
    failed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and failed.stderr.count("\n") == 1, failed.stderr
    assert f"could not be written: No space left on device" in failed.stderr and str(disk) in failed.stderr
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
    return {str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in folder.rglob("*") if path.is_file()}


TRAINING = "training"  # the moment: once the run has begun training (its label is printed)


@pytest.mark.slow
@pytest.mark.parametrize("signal_name, moment, store", [
    ("SIGINT", 0.2, "copied"), ("SIGINT", 1.0, "copied"), ("SIGINT", 2.0, "copied"), ("SIGTERM", 1.5, "copied"),
    ("SIGTERM", 3.0, "fresh"), ("SIGHUP", 2.5, "copied"),
    ("SIGINT", TRAINING, "copied"), ("SIGTERM", TRAINING, "copied"), ("SIGHUP", TRAINING, "copied"),
])
def test_a_signal_at_any_moment_ends_the_command_in_one_line_and_leaves_nothing_running(
        tmp_path, store_in, signal_name, moment, store):
    import signal
    import time

    from test_reliability_edges import alive, descendants

    uri = store_in(tmp_path) if store == "copied" else f"sqlite:///{tmp_path / 'mlflow.db'}"
    signum = getattr(signal, signal_name)
    args = ["--epochs", "6", "--train-size", "256", "--batch-size", "32", "--threads", "1", "--eval-batch-size", "512"]
    process = subprocess.Popen(initmem_command("run", *args, "--tracking-uri", uri), cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
