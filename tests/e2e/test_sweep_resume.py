"""A sweep killed mid-cell resumes that cell from its checkpoint, in the same child run, on relaunch."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

import initmem_core
from initmem_core import get_registry
from initmem_core.config import RunConfig
from initmem_core.training.plan import plan_run
from tests.support.cli_processes import children, cli_args, history, initmem_command, stored_runs

pytestmark = pytest.mark.slow(seconds=30)  # kills and relaunches a real sweep

CELL = dict(epochs=10, train_size=128, batch_size=16, threads=1, eval_batch_size=512)
ARGS = ["--sigma", "0.5,2", *cli_args(CELL), "--name", "resumable"]


def sweep_process(uri: str, cwd) -> subprocess.Popen:
    return subprocess.Popen(
        initmem_command("sweep", *ARGS, "--lockstep", "off", "--tracking-uri", uri),  # a lone cell killed mid-run
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_relaunch_resumes_a_killed_cell_in_its_run(tracking_uri, tmp_path):
    # The optimizer's lr filled in, as a sweep does.
    first = plan_run(RunConfig(sigma=0.5, **CELL), get_registry()).config
    folder = tmp_path / "initmem-checkpoints" / first.config_hash()
    process = sweep_process(tracking_uri, tmp_path)
    deadline = time.monotonic() + 240
    while not (folder.is_dir() and len(list(folder.iterdir())) >= 2):  # epochs 1 and 2 are saved
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[0]
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)  # the machine dies: the cell stays RUNNING
    process.wait()

    [killed] = stored_runs(tracking_uri, f"tags.config_hash = '{first.config_hash()}'")
    assert killed.info.status == "RUNNING"

    again = sweep_process(tracking_uri, tmp_path)
    output = again.communicate(timeout=300)[0]
    assert again.returncode == 0, output

    cells = children(tracking_uri, "resumable")
    assert sorted(r.info.status for r in cells) == ["FINISHED", "FINISHED"]
    [resumed] = [r for r in cells if r.data.tags["config_hash"] == first.config_hash()]
    assert resumed.info.run_id == killed.info.run_id
    losses = history(tracking_uri, resumed.info.run_id, "train_loss")
    assert [step for step, _ in losses] == list(range(11))  # every epoch once, none twice
    uninterrupted = initmem_core.run(first, tracking=False)
    assert [value for _, value in losses] == [row["train_loss"] for row in uninterrupted.history]
