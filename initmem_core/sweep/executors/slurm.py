"""``--executor slurm``: the sweep's cells as one Slurm array job, submitted with submitit.

Each cell is one array task with its own CPUs, GPUs and time limit. A task that Slurm preempts,
or that reaches its time limit, is requeued by submitit and resumes its cell (see
``remote_cell``). ``local=True`` runs the tasks as processes on this machine with submitit's
``LocalExecutor``: the same code path, for trying a sweep where there is no Slurm.

submitit's folder (job scripts, pickles, logs) and the progress files must be on a disk that
this machine and the compute nodes share, as is usual for a Slurm home or project folder.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from pathlib import Path
from typing import Any, Mapping

import submitit

from initmem_core.errors import ConfigError
from initmem_core.sweep.executors.base import CellTask, Job, RetriedCellProgress, SweepCells, fit_to_request, replay_progress
from initmem_core.sweep.executors.remote_cell import run_remote_cell

POLL_S = 1.0
PROGRESS_INTERVAL_S = 2.0  # a shared disk takes a line per cell every few seconds with ease


class ProgressFile:
    """A cell's progress events as JSON lines in a file: the queue between a job and the sweep.

    One writer at a time (the cell's job; a requeued attempt starts after the last one ended),
    appending whole lines; the reader takes complete lines only.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.offset = 0

    def put(self, event: Any) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps(event) + "\n")

    def take(self) -> list[Any]:
        """The events written since the last call."""
        if not self.path.exists():
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        complete = data[:data.rfind(b"\n") + 1]
        self.offset += len(complete)
        return [json.loads(line) for line in complete.splitlines()]


class SlurmCell(submitit.helpers.Checkpointable):
    """The job's callable. Checkpointable: on preemption or timeout submitit requeues it with the
    same arguments, and the cell resumes from its own checkpoint."""

    def __call__(self, task: CellTask, progress_path: str) -> tuple[str, str]:
        from initmem_core.tracking.cells import QueueProgress

        return run_remote_cell(task, QueueProgress(ProgressFile(progress_path), task.run_id, PROGRESS_INTERVAL_S))


class SlurmExecutor:
    name = "slurm"
    remote = True

    def __init__(self, folder: str | Path, partition: str | None = None, time_min: int = 60,
                 cpus_per_cell: float = 1.0, gpus_per_cell: float = 0.0, local: bool = False,
                 options: Mapping[str, str] | None = None):
        if cpus_per_cell <= 0 or gpus_per_cell < 0 or time_min < 1:
            raise ConfigError("--cpus-per-cell must be above 0, --gpus-per-cell 0 or more, --slurm-time 1 or more")
        if not float(gpus_per_cell).is_integer():
            raise ConfigError(f"--gpus-per-cell {gpus_per_cell:g}: Slurm allocates whole GPUs; "
                              "fractional GPUs need --executor ray")
        if not local and not (shutil.which("sbatch") and shutil.which("srun")):
            raise ConfigError("--executor slurm: sbatch and srun are not on this machine's PATH; launch the sweep "
                              "from a Slurm login node, or add --slurm-local to run the jobs here")
        self.folder, self.partition, self.time_min = Path(folder), partition, time_min
        self.cpus, self.gpus, self.local = cpus_per_cell, int(gpus_per_cell), local
        self.options = dict(options or {})  # any other sbatch option: account, qos, mem, constraint...

    def _submitit(self, sweep_name: str) -> submitit.AutoExecutor:
        executor = submitit.AutoExecutor(self.folder / "%j", cluster="local" if self.local else "slurm")
        parameters: dict[str, Any] = {"name": re.sub(r"[^\w.-]", "_", sweep_name), "timeout_min": self.time_min,
                                      "cpus_per_task": math.ceil(self.cpus), "gpus_per_node": self.gpus}
        if self.partition:
            parameters["slurm_partition"] = self.partition
        if self.options:
            parameters["slurm_additional_parameters"] = self.options
        executor.update_parameters(**parameters)
        return executor

    def pin(self, config):
        return fit_to_request(config, self.cpus, self.gpus)

    def run(self, cells: list, sweep: SweepCells) -> None:
        progress_folder = self.folder / "progress"
        progress_folder.mkdir(parents=True, exist_ok=True)
        executor = self._submitit(f"initmem-{sweep.name}")
        waiting: list[tuple[Job, ProgressFile]] = []
        for cell in cells:
            cell.config = fit_to_request(cell.config, self.cpus, self.gpus)
            job = sweep.submit(cell, scheduled=True)
            job.progress = job.progress and RetriedCellProgress(job.progress)
            waiting.append((job, ProgressFile(progress_folder / f"{cell.run_id}.jsonl")))
        try:
            with executor.batch():  # one array job for the whole sweep
                slurm_jobs = [executor.submit(SlurmCell(), CellTask(job.cell.config, job.cell.run_id, sweep.uri,
                                                                    sweep.experiment), str(channel.path))
                              for job, channel in waiting]
        except Exception as error:  # sbatch refused the array: no cell runs
            reason = " ".join(str(error).split())[:300]
            for job, _ in waiting:
                sweep.close(job, f"submission failed: {reason}")
            raise ConfigError(f"Slurm did not take the sweep's array job: {reason}") from None
        running = [(job, channel, slurm_job) for (job, channel), slurm_job in zip(waiting, slurm_jobs)]
        try:
            while running:
                time.sleep(POLL_S)
                # A finished job has written all its events: replay them first, then close its cell.
                done = [entry for entry in running if entry[2].done()]
                for job, channel, _ in running:
                    for _, call, args in channel.take():
                        replay_progress(job, call, args)
                for entry in done:
                    running.remove(entry)
                    sweep.close(entry[0], _error_of(entry[2]))
        except BaseException:  # Ctrl-C, or this process failing: no job should run on unwatched
            for _, _, slurm_job in running:
                slurm_job.cancel(check=False)
            sweep.interrupt(job for job, _, _ in running)
            raise


def _error_of(slurm_job: Any) -> str:
    """'' if the job returned (its run is ended in the store), else what Slurm says and where its log is."""
    try:
        return slurm_job.result()[1]
    except Exception:  # killed (out of memory, time limit), cancelled, or failed before the cell could start
        return f"Slurm job {slurm_job.job_id} ended without a result ({slurm_job.state}); see {slurm_job.paths.stderr}"
