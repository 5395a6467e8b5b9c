"""``--executor slurm``: the sweep's cells as one Slurm array job, submitted with submitit.

Each cell is one array task with its own CPUs, GPUs and time limit. A task that Slurm preempts,
or that reaches its time limit, is requeued by submitit and resumes its cell (see
``remote_cell``). ``local=True`` runs the tasks as processes on this machine with submitit's
``LocalExecutor``: the same code path, for trying a sweep where there is no Slurm.

Several cells per GPU: Slurm allocates whole GPUs, so ``gpus_per_cell=1/k`` (0.5, 0.25...)
packs k cells into one array task that holds one GPU and k times a cell's CPUs, and runs them
side by side, one process each (``SlurmTask``). The task waits for all k; requeued, it runs
them all again: a cell that finished does nothing, the others resume from their checkpoints.

submitit's folder (job scripts, pickles, logs) and the progress files must be on a disk that
this machine and the compute nodes share, as is usual for a Slurm home or project folder.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Any, cast

import submitit

from initmem_core.errors import ConfigError
from initmem_core.sweep.executor import Executor, Job, SweepCells
from initmem_core.vocabulary import FAILED
from initmem_plugins.executors.local import QueueProgress, die_with_parent, replay_progress
from initmem_plugins.executors.placement import pin_process, process_environment
from initmem_plugins.executors.remote_cell import CellTask, RetriedCellProgress, fit_to_request, run_remote_cell

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
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        return [json.loads(line) for line in complete.splitlines()]


def sbatch_options(items: list[str]) -> dict[str, str]:
    options = {}
    for item in items:
        key, equals, value = item.partition("=")
        if not (key.strip() and equals):
            raise ConfigError(f"--slurm-option {item!r}: expected KEY=VALUE, e.g. account=myproject or mem=32G")
        options[key.strip()] = value.strip()
    return options


def run_slurm_cell(task: CellTask, progress_path: str) -> tuple[str, str]:
    return run_remote_cell(task, QueueProgress(ProgressFile(progress_path), task.run_id, PROGRESS_INTERVAL_S))


def cells_per_task(gpus_per_cell: float) -> int:
    """How many cells share one array task's GPU: k for ``1/k`` of a GPU, else 1."""
    if 0 < gpus_per_cell < 1:
        cells = round(1 / gpus_per_cell)
        if abs(1 / gpus_per_cell - cells) < 0.01:
            return cells
    elif float(gpus_per_cell).is_integer():
        return 1
    raise ConfigError(
        f"--gpus-per-cell {gpus_per_cell:g}: Slurm allocates whole GPUs, so a cell takes a whole "
        "number of them, or 1/k of one to share it with k-1 others in one task "
        "(0.5, 0.25, 0.125...)"
    )


class SlurmTask(submitit.helpers.Checkpointable):
    """An array task's callable: its cells (one, or k sharing a GPU), each result in order.
    Checkpointable: on preemption or timeout submitit requeues it with the same arguments, and
    each cell resumes from its own checkpoint (or, finished, does nothing).

    One cell runs in this process. k cells run side by side, one spawned process each, while this
    process (submitit's rank 0, which requeues the task when Slurm signals it) waits for them all
    and stays alive until the last one ends, so that a signal is always handled."""

    def __call__(self, tasks: list[CellTask], progress_paths: list[str]) -> list[tuple[str, str]]:
        if len(tasks) == 1:
            return [run_slurm_cell(tasks[0], progress_paths[0])]
        return run_side_by_side(tasks, progress_paths)


def run_side_by_side(tasks: list[CellTask], progress_paths: list[str]) -> list[tuple[str, str]]:
    """Each cell in its own spawned process; a process that dies (out of memory) fails its cell
    alone. Leaving early (submitit requeues the task: ``SystemExit``) kills them all."""
    context = multiprocessing.get_context("spawn")
    members = []
    try:
        for index, (task, path) in enumerate(zip(tasks, progress_paths)):
            receive, send = context.Pipe(duplex=False)
            process = context.Process(
                target=_side_by_side_cell, args=(task, path, os.getpid(), send), name=f"initmem-cell-{index}"
            )
            process.start()
            send.close()
            members.append((process, receive))
        results: list[tuple[str, str]] = [(FAILED, "")] * len(members)
        waiting = {receive: index for index, (_, receive) in enumerate(members)}
        while waiting:
            for ready in cast(list[Connection], wait_for(list(waiting))):  # the ones it was given
                index = waiting.pop(ready)
                try:
                    results[index] = ready.recv()
                except EOFError:  # the process died before it could answer
                    process = members[index][0]
                    process.join()
                    results[index] = (
                        FAILED,
                        f"the cell's process died (exit code {process.exitcode}), e.g. out of memory",
                    )
        return results
    finally:
        for process, receive in members:
            if process.is_alive():
                process.kill()
            process.join()
            receive.close()


def _side_by_side_cell(task: CellTask, progress_path: str, parent_pid: int, results) -> None:
    """One of a task's k cells, in its own process: it dies with the task's process, leaves
    Slurm's warning signals to it (Slurm signals every process of the job), and sends back its
    (status, error)."""
    die_with_parent(parent_pid)
    pin_process(process_environment(None))  # the task's GPUs, as Slurm set them; cuBLAS before torch
    for number in (signal.SIGTERM, submitit.JobEnvironment._usr_sig()):
        signal.signal(number, signal.SIG_IGN)
    try:
        result = run_slurm_cell(task, progress_path)
    except Exception as error:  # e.g. the tracking server was down: the cell failed, not the task
        result = (FAILED, f"{type(error).__name__}: {error}")
    results.send(result)
    results.close()


class SlurmExecutor(Executor):
    name = "slurm"
    remote = True

    def __init__(
        self,
        folder: str | Path,
        partition: str | None = None,
        time_min: int = 60,
        cpus_per_cell: float = 1.0,
        gpus_per_cell: float = 0.0,
        local: bool = False,
        options: Mapping[str, str] | list[str] | None = None,
    ):
        if cpus_per_cell <= 0 or gpus_per_cell < 0 or time_min < 1:
            raise ConfigError("--cpus-per-cell must be above 0, --gpus-per-cell 0 or more, --slurm-time 1 or more")
        self.packed = cells_per_task(gpus_per_cell)  # cells per array task, sharing its GPU
        if not local and not (shutil.which("sbatch") and shutil.which("srun")):
            raise ConfigError(
                "--executor slurm: sbatch and srun are not on this machine's PATH; launch the sweep "
                "from a Slurm login node, or add --slurm-local to run the jobs here"
            )
        self.folder, self.partition, self.time_min = Path(folder), partition, time_min
        self.cpus, self.gpus, self.local = cpus_per_cell, gpus_per_cell, local
        # any other sbatch option: account, qos, mem, constraint... (``KEY=VALUE`` items: --slurm-option)
        self.options = sbatch_options(options) if isinstance(options, list) else dict(options or {})

    def _submitit(self, sweep_name: str) -> submitit.AutoExecutor:
        executor = submitit.AutoExecutor(self.folder / "%j", cluster="local" if self.local else "slurm")
        parameters: dict[str, Any] = {
            "name": re.sub(r"[^\w.-]", "_", sweep_name),
            "timeout_min": self.time_min,
            "cpus_per_task": math.ceil(self.cpus) * self.packed,
            "gpus_per_node": math.ceil(self.gpus),
        }
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
        packs = [waiting[start : start + self.packed] for start in range(0, len(waiting), self.packed)]
        try:
            with executor.batch():  # one array job for the whole sweep, one task per pack of cells
                slurm_jobs = [
                    executor.submit(
                        SlurmTask(),
                        [CellTask(job.cell.config, job.cell.run_id, sweep.uri, sweep.experiment) for job, _ in pack],
                        [str(channel.path) for _, channel in pack],
                    )
                    for pack in packs
                ]
        except Exception as error:  # sbatch refused the array: no cell runs
            reason = " ".join(str(error).split())[:300]
            for job, _ in waiting:
                sweep.close(job, f"submission failed: {reason}")
            raise ConfigError(f"Slurm did not take the sweep's array job: {reason}") from None
        running = list(zip(packs, slurm_jobs))
        try:
            while running:
                time.sleep(POLL_S)
                # A finished job has written all its events: replay them first, then close its cells.
                done = [entry for entry in running if entry[1].done()]
                for pack, _ in running:
                    for job, channel in pack:
                        for _, call, args in channel.take():
                            replay_progress(job, call, args)
                for entry in done:
                    running.remove(entry)
                    pack, slurm_job = entry
                    for (job, _), failure in zip(pack, _errors_of(slurm_job, len(pack))):
                        sweep.close(job, failure)
        except BaseException:  # Ctrl-C, or this process failing: no job should run on unwatched
            for _, slurm_job in running:
                slurm_job.cancel(check=False)
            sweep.interrupt(job for pack, _ in running for job, _ in pack)
            raise


def _errors_of(slurm_job: Any, cells: int) -> list[str]:
    """Each cell's '' if the job returned (their runs are ended in the store), else what Slurm
    says and where its log is."""
    try:
        return [error for _, error in slurm_job.result()]
    except Exception:  # killed (out of memory, time limit), cancelled, or failed before the cells could start
        return [
            f"Slurm job {slurm_job.job_id} ended without a result ({slurm_job.state}); see {slurm_job.paths.stderr}"
        ] * cells
