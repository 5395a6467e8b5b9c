"""A test plugin: ``pausing-sgd`` is plain SGD that can stop a cell mid-training for a test to kill.

With ``INITMEM_TEST_PAUSE_FILE`` set to a path, the first cell to reach its 5th optimizer step
(the first step of epoch 2 at 4 steps per epoch: epoch 1 is logged and checkpointed) creates that
file, waits for epoch 1's checkpoint to be on disk, writes its process id into the file and waits
there, for a test to kill or signal it. Every later cell, and every later attempt of that cell,
finds the file and goes on: each test run pauses once. Without the variable it never pauses, and
computes exactly what ``sgd`` computes.
"""

from __future__ import annotations

import itertools
import os
import shutil
import threading
import time
from pathlib import Path

from initmem_core import hookimpl

PAUSE_ENV = "INITMEM_TEST_PAUSE_FILE"
PAUSE_AT_STEP = 5
WAIT_S = 120


def install(site: Path) -> Path:
    """This module installed into ``site`` as pip would (its entry point included), for processes
    started with ``site`` on PYTHONPATH; returns ``site``."""
    shutil.copy(Path(__file__), site / "pausing_plugin.py")
    info = site / "initmem_test_pausing-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: initmem-test-pausing\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[initmem]\npausing = pausing_plugin\n")
    return site


def _pause_once(path: str) -> None:
    try:
        handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:  # another cell, or an earlier attempt of this one, paused already
        return
    # Epoch 1's checkpoint is written in the background: only once it is on disk may a test kill
    # this process and expect the next attempt to resume from it (a slow disk lost that race).
    for thread in threading.enumerate():
        if thread.name.startswith("initmem-checkpoint-"):
            thread.join()
    os.write(handle, str(os.getpid()).encode())
    os.close(handle)
    time.sleep(WAIT_S)
    raise RuntimeError(f"pausing-sgd waited {WAIT_S} s in process {os.getpid()} and nobody stopped it")


def build(model, config):
    from initmem_plugins.optimizers.builtin import build_sgd

    optimizer = build_sgd(model, config)
    steps = itertools.count(1)

    def before_step(optimizer, args, kwargs):
        if next(steps) == PAUSE_AT_STEP and os.environ.get(PAUSE_ENV):
            _pause_once(os.environ[PAUSE_ENV])

    optimizer.register_step_pre_hook(before_step)
    return optimizer


@hookimpl
def initmem_register_optimizers(register):
    # Element-wise, as SGD is: a lockstep sweep fuses its cells (the first model's step 5 pauses the job).
    register(
        "pausing-sgd",
        build,
        "SGD that pauses once at step 5 for a test (see INITMEM_TEST_PAUSE_FILE)",
        elementwise=True,
    )
