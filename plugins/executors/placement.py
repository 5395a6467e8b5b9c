"""Which GPU a worker process uses: one GPU per process, chosen before CUDA starts there.

CUDA reads ``CUDA_VISIBLE_DEVICES`` once, when it starts in a process; cuBLAS reads
``CUBLAS_WORKSPACE_CONFIG`` when its handle is created. So a worker's environment is set as the
process starts, before it imports torch (``pin_process``), and never changed while it runs cells.
Nothing here imports torch: the sweep process counts GPUs from the driver (``visible_gpus``).

- local ``--workers N``: worker ``slot`` keeps GPU ``gpus[slot % len(gpus)]`` for its whole life,
  so N workers spread evenly and N > GPUs shares each GPU between N/GPUs cells;
- Ray: a GPU task runs alone in its worker process and sees the GPUs Ray assigned it;
- Slurm: a task sees the GPUs Slurm allocated it; cells packed into one task share them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
CUBLAS_WORKSPACE = "CUBLAS_WORKSPACE_CONFIG"
#: The fixed cuBLAS workspace ``--deterministic`` needs (the size PyTorch uses on H100/H200 anyway).
DETERMINISTIC_WORKSPACE = ":4096:8"
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # one folder per GPU the driver knows


def parse_visible(value: str) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it: indices or UUIDs (``GPU-...``, ``MIG-...``),
    comma-separated; the list ends at the first entry that is neither (``-1`` hides every GPU)."""
    gpus = []
    for entry in value.split(","):
        entry = entry.strip()
        if not (entry.isdigit() or entry.startswith(("GPU-", "MIG-"))):
            break
        gpus.append(entry)
    return gpus


def installed_gpus() -> int:
    """NVIDIA GPUs on this machine, without starting CUDA: the driver's ``/proc`` entries, else
    ``nvidia-smi -L``; 0 where there is no NVIDIA driver."""
    try:
        return sum(1 for _ in NVIDIA_GPUS.iterdir())
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines()) if listed.returncode == 0 else 0


def visible_gpus() -> list[str]:
    """The GPUs this process may hand to its workers, each as a ``CUDA_VISIBLE_DEVICES`` entry:
    the user's ``CUDA_VISIBLE_DEVICES`` if set, else every installed GPU by index."""
    value = os.environ.get(VISIBLE_DEVICES)
    if value is not None:
        return parse_visible(value)
    return [str(index) for index in range(installed_gpus())]


def slot_gpu(slot: int, gpus: Sequence[str]) -> str | None:
    """The GPU local worker ``slot`` keeps (round robin: N workers spread evenly), or ``None``."""
    return gpus[slot % len(gpus)] if gpus else None


def process_environment(gpus: Sequence[str] | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a worker process sets before torch starts: the GPUs it sees (``None``: leave
    ``CUDA_VISIBLE_DEVICES`` as inherited), and the deterministic cuBLAS workspace unless the
    user set one, so that a ``--deterministic`` cell is deterministic even after another cell
    created the process's cuBLAS handle."""
    environ = os.environ if environ is None else environ
    environment = {}
    if gpus is not None:
        environment[VISIBLE_DEVICES] = ",".join(gpus)
    if CUBLAS_WORKSPACE not in environ:
        environment[CUBLAS_WORKSPACE] = DETERMINISTIC_WORKSPACE
    return environment


def worker_environments(
    workers: int, gpus: Sequence[str], environ: Mapping[str, str] | None = None
) -> list[dict[str, str]]:
    """Each local worker's environment, by slot: one GPU each, spread evenly (none set where
    there is no GPU: the workers inherit what the sweep sees)."""
    return [
        process_environment([gpu] if (gpu := slot_gpu(slot, gpus)) is not None else None, environ)
        for slot in range(workers)
    ]


def cuda_started() -> bool:
    """Whether torch has started CUDA in this process (never imports torch)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    return bool(cuda is not None and cuda.is_initialized())


def pin_process(environment: Mapping[str, str]) -> None:
    """Set a worker's GPU environment; refused once CUDA has started here (it would not apply)."""
    if cuda_started():
        raise RuntimeError(
            f"CUDA already started in process {os.getpid()}, so its GPUs cannot be chosen any more "
            f"({', '.join(f'{k}={v}' for k, v in environment.items())}); a worker must set them "
            "before its first cell"
        )
    os.environ.update(environment)
