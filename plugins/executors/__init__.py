"""Where a sweep's cells run, as a plugin: ``local`` (this process, or ``--workers N`` processes on
this machine), ``ray`` (a Ray cluster) and ``slurm`` (a Slurm array job, through submitit).

Loaded like any plugin (the ``executors`` entry point); ``INITMEM_LOAD_PLUGINS`` without
``executors`` leaves it out. Each is registered by import string: listing the executors imports
neither Ray nor submitit, which are optional (``pip install 'initmem[distributed]'``).
"""

from __future__ import annotations

from initmem_core import hookimpl

DISTRIBUTED = "pip install 'initmem[distributed]'"


@hookimpl
def initmem_register_executors(register):
    register(
        "local",
        "initmem_plugins.executors.local:LocalExecutor",
        "This machine: cells one after another here, or in --workers N processes; --lockstep fuses sigma groups",
        options=("workers", "lockstep", "lockstep_max"),
    )
    register(
        "ray",
        "initmem_plugins.executors.ray_executor:RayExecutor",
        "A Ray cluster (--ray-address), each cell (or --lockstep's fused sigma group) one task writing to a "
        "tracking server",
        needs=("ray",),
        install=DISTRIBUTED,
        options=("address", "cpus_per_cell", "gpus_per_cell", "max_retries", "lockstep", "lockstep_max"),
    )
    register(
        "slurm",
        "initmem_plugins.executors.slurm:SlurmExecutor",
        "Slurm: the cells (or --lockstep's fused sigma groups) as one array job (submitit), writing to a "
        "tracking server",
        needs=("submitit",),
        install=DISTRIBUTED,
        options=(
            "partition",
            "time_min",
            "cpus_per_cell",
            "gpus_per_cell",
            "options",
            "local",
            "lockstep",
            "lockstep_max",
        ),
    )
