"""Signals and a run's stop (training/stop_signals.py): a signal at any moment of `initmem run`
ends it in one line with nothing left running, a signal while the run is being ended, the
handlers put back, and the tags of an early end dropped once a resumed run finishes."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

import initmem_core
from initmem_core import Stopped
from initmem_core.tracking.tracker import MemoryTracker
from initmem_core.training.stop_signals import StopSignals
from tests.support.cli_processes import (
    TINY,
    alive,
    descendants,
    folder_state,
    initmem_command,
    mlflow_client,
    only_run,
    runs_in,
)
from tests.support.signal_progress import SignalAtStep

# -- signals at every moment ------------------------------------------------------------------


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
)  # (SIGTERM during training: test_resume.py) benchmarks/signal_moments.py (retired at bf423f4) tried many more
def test_a_signal_at_any_moment_ends_the_command_in_one_line_and_leaves_nothing_running(
    tmp_path, store_in, signal_name, moment, store
):
    import signal

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
        assert process.stdout.readline().strip() == "resnet20-sgd-b32-ep6-n256-s1.0-seed0"  # printed as training starts
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


# -- signals while the run is being ended -----------------------------------------------------


class SignalOnCall(MemoryTracker):
    """A tracker that sends this process a signal when ``call`` is made: a signal arriving while
    the run is being ended (what was a kill with the default handler back in place)."""

    def __init__(self, call: str, signum: int = signal.SIGTERM):
        super().__init__()
        self.call, self.signum, self.sent = call, signum, 0

    def _maybe_signal(self, call: str) -> None:
        if call == self.call and not self.sent:
            self.sent += 1
            os.kill(os.getpid(), self.signum)

    def set_tags(self, tags):
        self._maybe_signal("set_tags")
        super().set_tags(tags)

    def log_artifact(self, local_path, artifact_path=None):
        self._maybe_signal("log_artifact")
        super().log_artifact(local_path, artifact_path)

    def end_run(self, status="FINISHED"):
        self._maybe_signal("end_run")
        super().end_run(status)


def test_a_second_signal_while_stopping_still_ends_the_run_killed(tmp_path):
    tracker = SignalOnCall("set_tags", signal.SIGINT)  # the stop tags the run: a Ctrl-C arrives then
    with pytest.raises(Stopped) as stopped:
        initmem_core.run(tracker=tracker, progress=SignalAtStep(1), checkpoint_dir=str(tmp_path), **TINY)
    assert tracker.sent == 1 and tracker.status == "KILLED" and stopped.value.status == "KILLED"
    assert tracker.tags["stopped_by"] == "SIGTERM"


@pytest.mark.parametrize("call", ["log_artifact", "end_run"])
def test_a_signal_while_a_trained_run_is_written_finishes_it_then_stops(call):
    tracker = SignalOnCall(call)
    with pytest.raises(Stopped) as stopped:
        initmem_core.run(tracker=tracker, **TINY)
    assert tracker.sent == 1 and tracker.status == "FINISHED"
    assert stopped.value.status == "FINISHED" and stopped.value.exit_code == 143
    assert "final_weights.pt" in tracker.files and any(key == "best_val_test_acc" for _, key, _ in tracker.metrics)


def test_handlers_are_back_once_the_run_is_ended():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        stop.finishing = True
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # recorded, never raised: the run's last writes go on
        assert stop.requested and stop.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


# -- tags of an early end ---------------------------------------------------------------------


def test_a_resumed_run_that_finishes_loses_the_tags_of_its_early_end(tracking_uri, tmp_path):
    import signal

    import initmem_core
    from initmem_core import Stopped
    from tests.support.signal_progress import SignalAtStep

    tiny = dict(
        TINY, epochs=2, helper_process=False, tracking_uri=tracking_uri, checkpoint_dir=str(tmp_path / "checkpoints")
    )
    with pytest.raises(Stopped):
        initmem_core.run(progress=SignalAtStep(1, signal.SIGINT), **tiny)
    run = only_run(tracking_uri)
    assert run.data.tags["stopped_by"] == "SIGINT" and run.info.status == "KILLED"
    result = initmem_core.run(resume=True, **tiny)
    run = mlflow_client(tracking_uri).get_run(result.run_id)
    assert run.info.status == "FINISHED" and "stopped_by" not in run.data.tags and "failure_reason" not in run.data.tags
