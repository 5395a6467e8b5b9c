"""Set-up off the training path. Tracking through a helper process: the same run in the store as
tracking in process, a bad store still fails in one line before training, and nothing is lost when
either process dies. The collector held off while a run is built, and the CLI's fast exit."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core.errors import ConfigError, RunWarning
from initmem_core.tracking.tracker_process import TrackerProcess
from initmem_core.training.loop import NoProgress
from tests.support.cli_processes import SMALL, history, mlflow_client, only_run

runner = CliRunner()


def stored(uri: str, run_id: str) -> dict:
    client = mlflow_client(uri)
    run = client.get_run(run_id)
    return {
        "status": run.info.status,
        "params": run.data.params,
        "tags": {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
        "metrics": {key: history(uri, run_id, key) for key in run.data.metrics},
        "artifacts": sorted(a.path for a in client.list_artifacts(run_id)),
        "datasets": [(d.dataset.name, d.dataset.digest) for d in run.inputs.dataset_inputs],
    }


@pytest.fixture(scope="module")
def tracked_in_process(tmp_path_factory, store_in) -> tuple[str, str, dict]:
    """The run tracked in process, the reference the helper's runs are held to: its store, its id
    and what the store holds of it (one run for the tests of this module that compare with it)."""
    uri = store_in(tmp_path_factory.mktemp("in-process"))
    in_process = initmem_core.run(tracking_uri=uri, helper_process=False, **SMALL)
    return uri, in_process.run_id, stored(uri, in_process.run_id)


@pytest.mark.slow  # starts the tracking helper or initmem itself as a process
def test_a_run_tracked_by_the_helper_is_the_run_tracked_in_process(tracked_in_process):
    uri, in_process_id, theirs = tracked_in_process
    helper = initmem_core.run(tracking_uri=uri, helper_process=True, **SMALL)  # the same config, the same store
    ours = stored(uri, helper.run_id)
    assert helper.run_id != in_process_id and ours["status"] == "FINISHED"
    assert ours["metrics"] == theirs["metrics"] and len(ours["metrics"]["test_acc"]) == 4
    assert ours["params"] == theirs["params"] and ours["tags"] == theirs["tags"]
    assert ours["artifacts"] == theirs["artifacts"] and "final_weights.pt" in ours["artifacts"]
    assert ours["datasets"] == theirs["datasets"] != []


@pytest.mark.slow  # starts the tracking helper or initmem itself as a process
def test_the_training_process_never_imports_mlflow(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = textwrap.dedent(f"""
        import sys, initmem_core
        result = initmem_core.run(tracking_uri={uri!r}, **{SMALL!r})
        assert "mlflow" not in sys.modules, "mlflow imported"
        print(result.run_id)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert stored(uri, done.stdout.strip())["status"] == "FINISHED"


HELPER_BEFORE_TORCH = """
import sys
import initmem_core.tracking.tracker_process as tracker_process

started = tracker_process.TrackerProcess.__init__
def note(self, *args, **kwargs):
    print("torch imported when the helper started:", "torch" in sys.modules, flush=True)
    started(self, *args, **kwargs)
tracker_process.TrackerProcess.__init__ = note

from initmem_cli.app import main
sys.argv = ["initmem", "run", *sys.argv[1:]]
main()
"""


@pytest.mark.slow  # starts the tracking helper or initmem itself as a process
def test_initmem_run_starts_the_helper_before_it_imports_torch(tmp_path):
    """So that MLflow's import and the store's set-up overlap torch's import, not only the build."""
    script = tmp_path / "helper_first.py"
    script.write_text(HELPER_BEFORE_TORCH)
    args = [
        "--epochs",
        "1",
        "--train-size",
        "128",
        "--batch-size",
        "32",
        "--threads",
        "1",
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    done = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "torch imported when the helper started: False" in done.stdout


class FreezeWatcher(NoProgress):
    """Notes, at the start of training, whether the collector runs and how much it has frozen."""

    def start(self, epochs, steps_per_epoch):
        self.seen = (gc.isenabled(), gc.get_freeze_count())


def test_what_a_run_builds_is_frozen_out_of_the_collector_until_the_run_ends():
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    watcher = FreezeWatcher()
    initmem_core.run(tracking=False, progress=watcher, **SMALL)
    enabled, frozen = watcher.seen
    assert enabled and frozen > 10_000  # modules, data and model: out of the collector's scans
    assert gc.get_freeze_count() == 0 and gc.isenabled()  # as the caller had it


def test_a_caller_that_froze_objects_keeps_its_own_scheme():
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        watcher = FreezeWatcher()
        initmem_core.run(tracking=False, progress=watcher, **SMALL)
        enabled, frozen = watcher.seen
        # Not frozen again (that would add everything built since) nor unfrozen; frozen objects
        # freed by reference counting meanwhile only lower the count.
        assert enabled and frozen <= before and 0 < gc.get_freeze_count() <= before
    finally:
        gc.unfreeze()


@pytest.mark.slow  # starts the tracking helper or initmem itself as a process
def test_a_store_that_cannot_be_opened_fails_in_one_line_before_training(tmp_path):
    database = tmp_path / "mlflow.db"
    database.write_bytes(b"not a database" * 100)
    with pytest.raises(ConfigError, match=f"tracking store sqlite:///{database}.*cannot be reached") as raised:
        initmem_core.run(tracking_uri=f"sqlite:///{database}", helper_process=True, **SMALL)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "initmem-checkpoints").exists()  # nothing was trained


class KillHelperAfterEpoch(NoProgress):
    """Progress that SIGKILLs the tracking helper once an epoch is done."""

    def __init__(self, tracker: TrackerProcess, epoch: int):
        self.tracker, self.epoch = tracker, epoch

    def epoch_done(self, epoch, metrics):
        if epoch == self.epoch:
            os.kill(self.tracker._process.pid, signal.SIGKILL)
            self.tracker._process.wait()


@pytest.mark.slow  # starts the tracking helper or initmem itself as a process
def test_a_helper_that_dies_loses_nothing_initmem_sync_uploads_the_rest(tracked_in_process, tracking_uri, tmp_path):
    _, _, theirs = tracked_in_process
    tracker = TrackerProcess(tracking_uri, flush_every_s=3600)  # nothing reaches the store before the kill
    with pytest.warns(RunWarning, match="tracking helper process of run .* ended"):
        result = initmem_core.run(tracker=tracker, progress=KillHelperAfterEpoch(tracker, 1), **SMALL)
    assert result.status == "FINISHED" and "initmem sync" in result.unsynced
    assert stored(tracking_uri, result.run_id)["status"] == "RUNNING"
    synced = runner.invoke(app, ["sync", "--tracking-uri", tracking_uri])
    assert synced.exit_code == 0, synced.output
    ours = stored(tracking_uri, result.run_id)
    assert ours["status"] == "FINISHED" and ours["metrics"] == theirs["metrics"]  # every epoch, once
    assert ours["artifacts"] == theirs["artifacts"]


KILLED_MID_RUN = """
import json, os, signal, sys
import initmem_core

from initmem_core.training.loop import NoProgress

class KillSelf(NoProgress):
    def epoch_done(self, epoch, metrics):
        if epoch == 2:
            helper = [p for p in os.listdir("/proc") if p.isdigit() and
                      open(f"/proc/{p}/cmdline", "rb").read().count(b"initmem_core.tracking.tracker_process")
                      and open(f"/proc/{p}/stat").read().split()[3] == str(os.getpid())]
            open("helper.pid", "w").write(helper[0])
            os.kill(os.getpid(), signal.SIGKILL)

initmem_core.run(tracking_uri=sys.argv[1], progress=KillSelf(), **json.loads(sys.argv[2]))
"""


@pytest.mark.slow  # starts the tracking helper or initmem itself as a process
def test_a_training_process_killed_outright_leaves_its_epochs_in_the_store_and_resumes(tracking_uri, tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(KILLED_MID_RUN)
    killed = subprocess.run(
        [sys.executable, str(script), tracking_uri, json.dumps(SMALL)], cwd=tmp_path, capture_output=True, text=True
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    helper = int((tmp_path / "helper.pid").read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{helper}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{helper}").exists(), "the helper outlived its training process"
    run = only_run(tracking_uri)
    held = stored(tracking_uri, run.info.run_id)
    # Written at the end of the input although the 5 s batching interval had not passed.
    assert held["status"] == "RUNNING" and [step for step, _ in held["metrics"]["test_acc"]] == [0, 1, 2]
    resumed = initmem_core.run(tracking_uri=tracking_uri, resume=True, helper_process=True, **SMALL)
    assert resumed.run_id == run.info.run_id and stored(tracking_uri, run.info.run_id)["status"] == "FINISHED"
    assert [step for step, _ in stored(tracking_uri, run.info.run_id)["metrics"]["test_acc"]] == [0, 1, 2, 3]


class LockWhileTraining(NoProgress):
    """Holds an exclusive lock on the SQLite file from the start of training until epoch
    ``release`` is done, sleeping ``hold_s`` there first; notes when each epoch ended."""

    def __init__(self, database: str, release: int, hold_s: float = 0.0):
        import sqlite3

        self.connection = sqlite3.connect(database, isolation_level=None)
        self.release, self.hold_s, self.ended = release, hold_s, {}

    def start(self, epochs, steps_per_epoch):
        self.connection.execute("BEGIN EXCLUSIVE")
        self.started = time.monotonic()

    def epoch_done(self, epoch, metrics):
        self.ended[epoch] = time.monotonic() - self.started
        if epoch == self.release:
            time.sleep(self.hold_s)
            self.connection.execute("ROLLBACK")


@pytest.mark.slow  # starts the tracking helper or initmem itself as a process
def test_a_locked_store_never_holds_up_training(tracking_uri):
    """In process, the first write would wait up to MLflow's 20 s lock timeout."""
    lock = LockWhileTraining(tracking_uri[len("sqlite:///") :], release=3)
    result = initmem_core.run(tracker=TrackerProcess(tracking_uri, flush_every_s=0), progress=lock, **SMALL)
    assert lock.ended[3] < 15, lock.ended  # every epoch trained while the store was locked
    held = stored(tracking_uri, result.run_id)
    assert held["status"] == "FINISHED" and [step for step, _ in held["metrics"]["test_acc"]] == [0, 1, 2, 3]


@pytest.mark.slow  # the helper waits out MLflow's 20 s lock timeout
def test_the_helpers_warnings_reach_the_training_process_in_one_line(tracking_uri):
    lock = LockWhileTraining(tracking_uri[len("sqlite:///") :], release=1, hold_s=22)
    with pytest.warns(RunWarning, match="is not answering .*database is locked") as warned:
        result = initmem_core.run(tracker=TrackerProcess(tracking_uri, flush_every_s=0), progress=lock, **SMALL)
    assert all("\n" not in str(w.message) for w in warned)
    held = stored(tracking_uri, result.run_id)
    assert held["status"] == "FINISHED" and [step for step, _ in held["metrics"]["test_acc"]] == [0, 1, 2, 3]


@pytest.mark.slow  # starts the tracking helper or initmem itself as a process
def test_the_cli_skips_the_teardown_after_training_but_keeps_its_output_and_exit_codes(tmp_path, initmem_subprocess):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    small = ["--epochs", "1", "--train-size", "128", "--batch-size", "32", "--threads", "1"]
    env = dict(os.environ, COLUMNS="200")
    done = initmem_subprocess(env, "run", *small, "--tracking-uri", uri, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split("MLflow run id: ")[1].split()[0]  # the last line made it out
    assert "best_val_test_acc" in done.stdout and stored(uri, run_id)["status"] == "FINISHED"
    # Fails after torch was imported (no checkpoint to resume): the code and the one line survive.
    failed = initmem_subprocess(env, "run", *small, "--seed", "7", "--resume", "--tracking-uri", uri, cwd=tmp_path)
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1 and "checkpoint" in failed.stderr, failed.stderr
