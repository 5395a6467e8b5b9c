"""One run of a config at a time (the run's lease): a live run holds its config, and once its process
is dead the run resumes, whatever a later run of its config did."""

from __future__ import annotations

import signal
import subprocess

import pytest

import initmem_core
from initmem_core import Stopped
from tests.support.cli_processes import TINY, history, initmem_command, mlflow_client, only_run, runs_in
from tests.support.signal_progress import SignalAtStep


@pytest.mark.slow
def test_a_live_run_holds_its_config_and_once_its_process_is_dead_it_resumes(tmp_path, tracking_uri):

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
        assert first.stdout.readline().strip() == "resnet20-sgd-b32-ep12-n256-s1.0-seed0"  # training
        second = subprocess.run(initmem_command(*args), cwd=tmp_path, capture_output=True, text=True, timeout=60)
        resumed_early = subprocess.run(
            initmem_command(*args, "--resume"), cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert first.poll() is None, "the first run ended before the others were tried: make it longer"
    finally:
        first.send_signal(signal.SIGKILL)  # its owner dies outright: the run stays RUNNING
        first.wait()
    assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
    assert f"resnet20-sgd-b32-ep12-n256-s1.0-seed0 is already running in process {first.pid}" in second.stderr
    assert resumed_early.returncode == 2 and resumed_early.stderr.count("\n") == 1, resumed_early.stderr
    assert f"the run of this config is still running in process {first.pid}" in resumed_early.stderr
    assert runs_in(tracking_uri) == [("resnet20-sgd-b32-ep12-n256-s1.0-seed0", "RUNNING")]  # neither wrote a run

    resumed = subprocess.run(
        initmem_command(*args, "--resume"), cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    assert runs_in(tracking_uri) == [("resnet20-sgd-b32-ep12-n256-s1.0-seed0", "FINISHED")]


def test_a_run_whose_process_died_resumes_whatever_a_later_run_of_its_config_did(tracking_uri, tmp_path):

    from initmem_core.errors import RunWarning

    tiny = dict(
        TINY, epochs=2, helper_process=False, tracking_uri=tracking_uri, checkpoint_dir=str(tmp_path / "checkpoints")
    )
    with pytest.raises(Stopped):
        initmem_core.run(progress=SignalAtStep(3, signal.SIGTERM), **tiny)  # 2 steps an epoch: stops in epoch 2
    first, client = only_run(tracking_uri), mlflow_client(tracking_uri)
    with pytest.warns(RunWarning, match="unfinished run"):
        later = initmem_core.run(**tiny)  # the same config again, to the end
    resumed = initmem_core.run(resume=True, **tiny)
    assert resumed.run_id == first.info.run_id != later.run_id
    assert client.get_run(first.info.run_id).info.status == client.get_run(later.run_id).info.status == "FINISHED"
    assert [step for step, _ in history(tracking_uri, first.info.run_id, "test_acc")] == [0, 1, 2]
