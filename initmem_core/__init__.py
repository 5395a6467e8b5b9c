"""initmem: how much does training remember its initialization scale?

The documented Python API, which the CLI is a thin layer over. Importing this package is cheap:
torch and mlflow load only when a run, sweep or report needs them (``run`` and friends resolve
lazily).

>>> import initmem_core
>>> result = initmem_core.run(arch="resnet20", sigma=2.0, epochs=5, tracking=False)
>>> sweep = initmem_core.run_sweep({"sigma": "0.5:2:4", "opt": ["sgd", "adam"], "epochs": 5})
>>> initmem_core.write_export(initmem_core.export_sweep(sweep.name), "sweep.json.gz")
>>> report = initmem_core.build_report(initmem_core.read_export("sweep.json.gz").records)

The subpackages follow a run: ``plugin_system`` (finding components), ``training`` (one run),
``tracking`` (where its numbers go), ``sweep`` (a grid of runs), ``report`` (what the grid shows).
What is imported from here, and ``initmem_core.contracts``, ``initmem_core.kernels`` and
``initmem_core.testing``, is the public API; the subpackages' modules may change.
"""

from __future__ import annotations

import importlib
from typing import Any

from initmem_core.config import RunConfig
from initmem_core.contracts import DatasetBundle, EvalState
from initmem_core.errors import ConfigError, InitmemError, UnknownComponentError
from initmem_core.hookspecs import hookimpl
from initmem_core.plugin_system.api_version import API_VERSION
from initmem_core.plugin_system.loader import get_registry, load_registry

#: Public names that pull in torch or mlflow, imported on first use.
_LAZY = {
    "run": "initmem_core.training.runner",
    "RunResult": "initmem_core.training.runner",
    "Diverged": "initmem_core.errors",
    "Stopped": "initmem_core.training.stop_signals",
    "run_sweep": "initmem_core.sweep.launch",
    "plan_sweep": "initmem_core.sweep.grid",
    "SweepResult": "initmem_core.sweep.launch",
    "build_report": "initmem_core.report.memory",
    "load_sweep_records": "initmem_core.tracking.records",
    # a sweep as one file and back (initmem export, initmem report --from)
    "SweepExport": "initmem_core.tracking.export",
    "export_sweep": "initmem_core.tracking.export",
    "write_export": "initmem_core.tracking.export",
    "read_export": "initmem_core.tracking.export",
}

__all__ = [
    "API_VERSION",
    "ConfigError",
    "DatasetBundle",
    "EvalState",
    "InitmemError",
    "RunConfig",
    "UnknownComponentError",
    "get_registry",
    "hookimpl",
    "load_registry",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'initmem_core' has no attribute {name!r}")
