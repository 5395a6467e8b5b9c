"""Where a sweep's cells run: ``local`` (this machine), ``ray`` (a Ray cluster) or ``slurm``.

``base`` says what an executor does; each other module is one executor. Ray and submitit are
optional (``pip install 'initmem[distributed]'``) and imported only by the executor that uses them.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from initmem_core.errors import ConfigError
from initmem_core.sweep.executors.base import Executor

EXECUTORS = ("local", "ray", "slurm")
_NEEDS = {"ray": "ray", "slurm": "submitit"}


def make_executor(name: str, **options: Any) -> Executor:
    """``make_executor("ray", address="auto", gpus_per_cell=0.5)``; options are the executor's
    constructor arguments (see ``LocalExecutor``, ``RayExecutor``, ``SlurmExecutor``)."""
    if name not in EXECUTORS:
        raise ConfigError(f"--executor: unknown value '{name}'; valid values: {', '.join(EXECUTORS)}")
    package = _NEEDS.get(name)
    if package and importlib.util.find_spec(package) is None:
        raise ConfigError(
            f"--executor {name} needs {package}, which is not installed: pip install 'initmem[distributed]'"
        )
    if name == "ray":
        from initmem_core.sweep.executors.ray_executor import (  # lazy: kept out of the CLI's start-up
            RayExecutor,
        )

        return RayExecutor(**options)
    if name == "slurm":
        from initmem_core.sweep.executors.slurm import SlurmExecutor  # lazy: imports submitit

        return SlurmExecutor(**options)
    from initmem_core.sweep.executors.local import (  # lazy: kept out of the CLI's start-up
        LocalExecutor,
    )

    return LocalExecutor(**options)
