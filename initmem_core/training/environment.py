"""Where a run ran: ``environment/system.json``, an artifact of every run.

Python, the OS, the CPU (model, cores, memory), torch with the CUDA and cuDNN it was built
with, the GPUs (model and count) and the environment variables that change how torch computes
or where it places work. (The installed packages, ``environment/requirements.txt``, are read by
the process that writes the run: ``tracking.provenance``.) Derived once per process, since a
sweep's worker trains many cells; the GPUs' names once CUDA has started (a CPU run on a GPU
machine does not start CUDA for them). No variable whose name says it holds a secret is kept.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

#: The artifact this module's description is logged as.
SYSTEM_ARTIFACT = "environment/system.json"
#: Environment variables that change what torch computes or where: kept in the description.
KEPT_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
)
KEPT_PREFIXES = ("INITMEM_",)
_SECRET = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL|AUTH|KEY", re.IGNORECASE)


def system_description() -> dict[str, Any]:
    """The machine, torch and the environment variables that matter, as ``system.json`` holds them."""
    import torch

    return {**_machine(), **_torch(torch.cuda.is_initialized()), "environment_variables": kept_variables()}


def kept_variables(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of ``KEPT_VARIABLES`` and ``INITMEM_*`` that are set, none named like a secret."""
    environ = dict(os.environ) if environ is None else environ
    return {
        name: value
        for name, value in sorted(environ.items())
        if (name in KEPT_VARIABLES or name.startswith(KEPT_PREFIXES)) and not _SECRET.search(name)
    }


@functools.cache
def _machine() -> dict[str, Any]:
    import psutil

    return {
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "cpu_logical_cores": psutil.cpu_count(logical=True),
        "cpu_physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
    }


def _cpu_model() -> str:
    """The CPU's name as the kernel gives it (Linux), else as Python's ``platform`` does."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


@functools.lru_cache(maxsize=2)
def _torch(cuda_started: bool) -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if cuda else 0
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,  # what torch was built with; None for a CPU build
        "cudnn": torch.backends.cudnn.version() if cuda and torch.backends.cudnn.is_available() else None,
        "gpu_count": gpus,
        # Naming them starts CUDA: only once the run has started it.
        "gpus": [torch.cuda.get_device_name(index) for index in range(gpus)] if cuda_started else None,
    }
