"""initmem: how much does training remember its initialization scale?

The Python API the CLI is a thin layer over. Importing this package is cheap: torch and mlflow
load only when a run, sweep or report needs them (``run`` and friends resolve lazily).

>>> import initmem_core
>>> result = initmem_core.run(arch="resnet20", sigma=2.0, epochs=5, tracking=False)
"""

from __future__ import annotations

import importlib
from typing import Any

from .api_version import API_VERSION
from .config import RunConfig
from .errors import InitmemError
from .hookspecs import hookimpl
from .plugins import get_registry, load_registry

#: Public names that pull in torch or mlflow, imported on first use.
_LAZY = {
    "run": ".runner", "RunResult": ".runner",
    "run_sweep": ".sweep", "SweepResult": ".sweep",
    "build_report": ".report", "load_sweep_records": ".records",
}

__all__ = ["API_VERSION", "InitmemError", "RunConfig", "get_registry", "hookimpl", "load_registry", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'initmem_core' has no attribute {name!r}")
