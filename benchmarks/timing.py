"""What every timed comparison of the benchmarks shares: the device clock and the bare loop.

``synchronizer`` makes a host clock read include queued device work; ``BareLoop`` is the hand-written
baseline a training step is compared with (gpu_check's speed step; the CPU comparisons of
docs/PERFORMANCE.md were made with the same loop, in bench.py, retired at bf423f4);
``code_version`` says which code a figure was measured on.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from initmem_core import get_registry
from initmem_core.config import RunConfig
from initmem_core.training.plan import plan_run
from initmem_core.training.setup import build_setup

ROOT = Path(__file__).resolve().parents[1]
#: The modules whose code the figures measure; their digests say which version was measured.
MEASURED_CODE = (
    "initmem_core/training/loop.py",
    "initmem_core/training/setup.py",
    "initmem_core/training/loaders.py",
    "initmem_core/training/runner.py",
    "initmem_core/tracking/tracker.py",
    "initmem_core/training/divergence.py",
    "initmem_core/training/checkpoint_format.py",
    "initmem_core/training/checkpoint_store.py",
    "initmem_core/training/state.py",
)


def synchronizer(device: torch.device) -> Callable[[], None]:
    """Wait for queued device work, so a host clock read measures it (a no-op on the CPU)."""
    if device.type == "cuda":
        return torch.cuda.synchronize
    if device.type == "mps":
        return torch.mps.synchronize
    return lambda: None


class BareLoop:
    """The hand-written baseline: what one writes without a framework, on the same device.

    The model comes from ``build_setup`` so that class, initialization and placement are
    initmem's; the optimizer is built here by hand with the same class and hyperparameters. The
    data is normalised once up front and stays on the device; each epoch shuffles by index.
    """

    def __init__(self, config: RunConfig):
        setup = build_setup(plan_run(config, get_registry()))
        self.device, self.config = setup.device, config
        self.model = setup.model
        if config.opt != "sgd":
            raise SystemExit("the bare loop is written for --opt sgd")
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
        bundle = setup.dataset
        mean = torch.tensor(bundle.mean).view(1, -1, 1, 1)
        std = torch.tensor(bundle.std).view(1, -1, 1, 1)
        self.x = ((bundle.train_x.float() / bundle.pixel_scale - mean) / std).to(self.device)
        self.y = bundle.train_y.to(self.device)
        self.forward = torch.compile(self.model) if config.compile else self.model
        self.sync = synchronizer(self.device)

    def epoch(self) -> float:
        """One epoch of training steps; returns its seconds."""
        model, optimizer, config = self.model, self.optimizer, self.config
        memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
        n, size = len(self.y), config.batch_size
        model.train()
        self.sync()
        began = time.perf_counter()
        order = torch.randperm(n, device=self.device)
        for start in range(0, n, size):
            rows = order[start : start + size]
            x, y = self.x[rows].contiguous(memory_format=memory_format), self.y[rows]
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=config.amp == "bf16"):
                loss = F.cross_entropy(self.forward(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        self.sync()
        return time.perf_counter() - began


def code_version() -> dict[str, Any]:
    """The git commit and a digest of each measured module (the working tree may differ from it)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    digests = {
        name: hashlib.sha256((ROOT / name).read_bytes()).hexdigest()[:12]
        for name in MEASURED_CODE
        if (ROOT / name).exists()
    }
    return {"commit": commit, "sha256": digests}
