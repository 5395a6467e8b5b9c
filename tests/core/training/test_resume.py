"""Killed, stopped or interrupted runs resume to exactly the bits of a run left alone."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core.config import from_mapping
from initmem_core.errors import ConfigError, RunWarning
from initmem_core.plugin_system.loader import get_registry
from initmem_core.tracking.tracker import MlflowTracker
from initmem_core.training.checkpoint_format import FORMAT, read_checkpoint
from initmem_core.training.plan import plan_run
from initmem_core.training.resume import find_resumable
from initmem_core.training.stop_signals import Stopped
from tests.support.cli_processes import cli_args, history, initmem_command, mlflow_client, only_run
from tests.support.signal_progress import SignalAtStep


def hash_of(values) -> str:
    """The hash of the config as run: its plan resolves lr to the optimizer's declared default."""
    return plan_run(from_mapping(values), get_registry()).config.config_hash()


pytestmark = pytest.mark.slow  # resume: real runs killed and continued, some in subprocesses

runner = CliRunner()
# 16 steps an epoch; momentum and augmentation so that optimizer state and every RNG matter.
CONFIG = dict(
    epochs=4, train_size=256, batch_size=16, threads=1, eval_batch_size=512, augment="on", momentum=0.9, seed=3
)
ARGS = cli_args(CONFIG)
CONFIG_HASH = hash_of(CONFIG)
STEPS_PER_EPOCH = 16


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: its history, final weights and checkpoint folder."""
    root = tmp_path_factory.mktemp("reference")
    result = initmem_core.run(tracking=False, checkpoint_dir=str(root), **CONFIG)
    return result.history, result.model.state_dict(), root / CONFIG_HASH


def assert_matches_reference(uri, run_id, reference, tmp_path):
    """Every metric step logged once, with the reference's value; final weights bit-identical."""
    rows, weights, _ = reference
    client = mlflow_client(uri)
    for key in ("train_loss", "val_acc", "test_loss", "weight_norm", "clock_sgd", "lr"):
        assert history(uri, run_id, key) == [(row["epoch"], row[key]) for row in rows], key
    path = client.download_artifacts(run_id, "final_weights.pt", str(tmp_path))
    final = torch.load(path, weights_only=True)
    assert final.keys() == weights.keys() and all(torch.equal(final[k], weights[k]) for k in final)
    # The per-layer table went through the checkpoint too: every evaluation point, not just the resumed ones.
    table = Path(client.download_artifacts(run_id, "layer_norms.csv", str(tmp_path))).read_text().splitlines()
    assert [int(line.split(",")[0]) for line in table[1:]] == [epoch for epoch in range(5) for _ in range(20)]


def start_cli_run(uri: str) -> subprocess.Popen:
    return subprocess.Popen(
        initmem_command("run", *ARGS, "--tracking-uri", uri),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"the run ended before {path.name} appeared: {process.stderr.read()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"{path.name} did not appear within {timeout} s")
        time.sleep(0.002)


def test_sigkill_mid_epoch_then_resume_equals_the_uninterrupted_run(tracking_uri, tmp_path, reference):
    folder = tmp_path / "initmem-checkpoints" / CONFIG_HASH
    process = start_cli_run(tracking_uri)
    wait_for(folder / "ckpt-e000002-s000000.pt", process)
    process.kill()  # SIGKILL: no handler runs, nothing is flushed
    process.wait()
    assert not (folder / "ckpt-e000003-s000000.pt").exists(), "killed too late: epoch 3 had finished"
    dead = only_run(tracking_uri)
    assert dead.info.status == "RUNNING"

    result = runner.invoke(app, ["run", *ARGS, "--tracking-uri", tracking_uri, "--resume"])
    assert result.exit_code == 0, result.output
    resumed = only_run(tracking_uri)
    assert resumed.info.run_id == dead.info.run_id and resumed.info.status == "FINISHED"
    assert_matches_reference(tracking_uri, dead.info.run_id, reference, tmp_path)


def test_sigterm_saves_a_checkpoint_marks_the_run_killed_and_exits_143(tracking_uri, tmp_path, reference):
    process = start_cli_run(tracking_uri)
    wait_for(tmp_path / "initmem-checkpoints" / CONFIG_HASH / "ckpt-e000001-s000000.pt", process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 143
    stderr = process.stderr.read()
    assert "stopped by SIGTERM" in stderr and "--resume" in stderr and len(stderr.strip().splitlines()) == 1, stderr
    run = only_run(tracking_uri)
    assert run.info.status == "KILLED" and run.data.tags["stopped_by"] == "SIGTERM"

    result = runner.invoke(app, ["run", *ARGS, "--tracking-uri", tracking_uri, "--resume"])
    assert result.exit_code == 0, result.output
    assert_matches_reference(tracking_uri, run.info.run_id, reference, tmp_path)


class DiesAtEpoch:
    """Progress that raises once an epoch has been logged, before its checkpoint is written."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def start(self, epochs, steps_per_epoch):
        pass

    def advance(self, steps):
        pass

    def epoch_done(self, epoch, metrics):
        if epoch == self.epoch:
            raise RuntimeError("the machine died")


class DroppedWrites(MlflowTracker):
    """A process killed outright: whatever the tracker had not written yet is lost."""

    def end_run(self, status="FINISHED"):
        self.pending = type(self.pending)()


def test_a_resume_logs_the_epochs_a_hard_kill_lost_from_its_checkpoint(tracking_uri, tmp_path, reference):
    tracker = DroppedWrites(tracking_uri, flush_every_s=3600)  # nothing written after the start
    with pytest.raises(RuntimeError, match="machine died"):
        initmem_core.run(tracker=tracker, progress=DiesAtEpoch(3), **CONFIG)
    dead = only_run(tracking_uri)
    assert dead.info.status == "RUNNING" and history(tracking_uri, dead.info.run_id, "val_acc") == []

    initmem_core.run(tracking_uri=tracking_uri, resume=True, **CONFIG)  # from the epoch-2 checkpoint
    assert_matches_reference(tracking_uri, dead.info.run_id, reference, tmp_path)  # epochs 0-2 came from it


@pytest.mark.parametrize("signum, damage", [(signal.SIGTERM, None), (signal.SIGINT, "truncate")])
def test_stop_mid_epoch_resumes_from_that_step_or_from_the_one_before(
    tracking_uri, tmp_path, reference, signum, damage
):
    with pytest.raises(Stopped) as stopped:
        initmem_core.run(tracking_uri=tracking_uri, progress=SignalAtStep(2 * STEPS_PER_EPOCH + 5, signum), **CONFIG)
    assert stopped.value.exit_code == 128 + signum  # 143 for SIGTERM, 130 for Ctrl-C
    newest = Path(stopped.value.checkpoint)
    assert newest.name == "ckpt-e000002-s000005.pt"
    folder = newest.parent
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt-e000002-s000000.pt", newest.name]  # two kept
    run = only_run(tracking_uri)
    assert run.info.status == "KILLED" and run.data.tags["stopped_by"] == signum.name
    assert folder.name == CONFIG_HASH
    point = find_resumable(folder)
    assert (point.run_id, point.epoch, point.step) == (run.info.run_id, 2, 5)

    if damage:
        newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
        with pytest.warns(RunWarning, match="ckpt-e000002-s000005.pt cannot be read.*using ckpt-e000002-s000000.pt"):
            initmem_core.run(tracking_uri=tracking_uri, resume=True, **CONFIG)
    else:
        initmem_core.run(tracking_uri=tracking_uri, resume=True, **CONFIG)
    assert_matches_reference(tracking_uri, run.info.run_id, reference, tmp_path)
    with pytest.raises(ConfigError, match="already finished"):
        initmem_core.run(tracking_uri=tracking_uri, resume=True, **CONFIG)


def test_checkpoint_holds_the_whole_state_as_plain_data(reference):
    history, weights, folder = reference
    # a finished run keeps its last checkpoint only (--keep-checkpoints last, the default)
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt-e000004-s000000.pt"]
    state = read_checkpoint(folder / "ckpt-e000004-s000000.pt")  # torch.load(weights_only=True)
    assert state["format"] == FORMAT and state["config_hash"] == CONFIG_HASH and state["run_id"]
    assert (state["epoch"], state["step"], state["config"]["sigma"]) == (4, 0, 1.0)
    assert all(torch.equal(state["model"][k], weights[k]) for k in weights)
    assert any(k.endswith("running_var") for k in state["model"])
    assert state["optimizer"]["state"] and "scheduler" not in state  # the schedule follows from the position
    assert state["initial_params"].keys() == {k for k in weights if "running" not in k and "num_batches" not in k}
    # sgd's default lr 0.05 at momentum 0.9: the effective step of the clocks is 0.05 / (1 - 0.9)
    assert state["clocks"]["adapt"] == pytest.approx(4 * STEPS_PER_EPOCH * 0.05 / (1 - 0.9))
    assert state["history"] == history
    assert state["loader"]["generator"].dtype == torch.uint8
    assert {"torch", "python", "numpy"} <= state["rng"].keys()
    norms = state["metrics"]["weight-norms"]
    assert norms["table"].shape == (5, 20, 4) and norms["epochs"].tolist() == [0, 1, 2, 3, 4]  # 5 points x 20 kernels


def test_resume_with_another_config_names_the_keys_that_differ(tmp_path):
    initmem_core.run(tracking=False, checkpoint_dir=str(tmp_path), epochs=1, train_size=64, threads=1)
    changed = dict(tracking=False, checkpoint_dir=str(tmp_path), epochs=2, train_size=64, threads=1, lr=0.1)
    with pytest.raises(ConfigError, match=r"nothing to resume.*differs in lr \(0.05 -> 0.1\), epochs \(1 -> 2\)"):
        initmem_core.run(resume=True, **changed)
    # A checkpoint found under the other config's hash (copied there) is refused all the same.
    source = next(tmp_path.glob("*/ckpt-*.pt"))
    target = tmp_path / hash_of({"epochs": 2, "train_size": 64, "lr": 0.1}) / source.name
    target.parent.mkdir()
    shutil.copy(source, target)
    with pytest.raises(ConfigError, match=r"is of a different config: lr \(0.05 -> 0.1\), epochs \(1 -> 2\)"):
        initmem_core.run(resume=True, **changed)


def test_a_fresh_run_warns_that_it_replaces_an_unfinished_runs_checkpoints(tmp_path):
    small = dict(tracking=False, checkpoint_dir=str(tmp_path), epochs=2, train_size=64, batch_size=32, threads=1)
    with pytest.raises(Stopped):
        initmem_core.run(progress=SignalAtStep(3, signal.SIGTERM), **small)  # 2 steps an epoch
    folder = tmp_path / hash_of({k: v for k, v in small.items() if k != "tracking"})
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt-e000001-s000000.pt", "ckpt-e000001-s000001.pt"]
    with pytest.warns(RunWarning, match="unfinished run of this config \\(epoch 1 of 2\\).*--resume"):
        fresh = initmem_core.run(**small)
    files = sorted(p for p in folder.iterdir() if p.is_file())
    assert [p.name for p in files] == ["ckpt-e000002-s000000.pt"]  # finished: its last one only
    assert {read_checkpoint(p)["run_id"] for p in files} == {fresh.run_id}
    # The unfinished run's newest checkpoint is kept aside, where --resume still finds it.
    (parked,) = [p for p in folder.iterdir() if p.is_dir()]
    assert [p.name for p in parked.iterdir()] == ["ckpt-e000001-s000001.pt"] and parked.name != f"run-{fresh.run_id}"
