"""``--executor slurm``: the sweep's cells as one Slurm array job, submitted with submitit.

Each cell is one array task with its own CPUs, GPUs and time limit; with ``--lockstep``, each
fused sigma group is one array task (one cell's CPUs and GPUs) training its cells as one model,
each into its own child run (``lockstep``, ``remote_cell.run_remote_job``). A task that Slurm
preempts, or that reaches its time limit, is requeued by submitit and resumes its cells (see
``remote_cell``). ``local=True`` runs the tasks as processes on this machine with submitit's
``LocalExecutor``: the same code path, for trying a sweep where there is no Slurm.

Several cells per GPU: Slurm allocates whole GPUs, so ``gpus_per_cell=1/k`` (0.5, 0.25...)
packs k jobs (a cell each, or a fused group) into one array task that holds one GPU and k times
a cell's CPUs, and runs them side by side, one process each (``SlurmTask``). The task waits for
all k; requeued, it runs them all again: a cell that finished does nothing, the others resume
from their checkpoints.

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
from initmem_plugins.executors.lockstep import DEFAULT_MAX, Lockstep
from initmem_plugins.executors.placement import pin_process, process_environment
from initmem_plugins.executors.remote_cell import CellTask, fit_to_request, run_remote_job, submit_remote

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


def run_slurm_job(tasks: list[CellTask], progress_paths: list[str]) -> list[tuple[str, str]]:
    """A job (one cell, or a fused sigma group), each cell's progress into its own file."""
    progresses = [
        QueueProgress(ProgressFile(path), task.run_id, PROGRESS_INTERVAL_S)
        for task, path in zip(tasks, progress_paths, strict=True)
    ]
    return run_remote_job(tasks, progresses)


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
    """An array task's callable: its jobs (one, or k sharing a GPU; each a cell or a fused sigma
    group of ``sizes`` cells, in order), each cell's result in order. Checkpointable: on
    preemption or timeout submitit requeues it with the same arguments, and each cell resumes
    from its own checkpoint (or, finished, does nothing).

    One job runs in this process. k jobs run side by side, one spawned process each, while this
    process (submitit's rank 0, which requeues the task when Slurm signals it) waits for them all
    and stays alive until the last one ends, so that a signal is always handled."""

    def __init__(self, sizes: list[int] | None = None):
        self.sizes = sizes  # cells per job; None: one each

    def __call__(self, tasks: list[CellTask], progress_paths: list[str]) -> list[tuple[str, str]]:
        sizes = self.sizes or [1] * len(tasks)
        starts = [sum(sizes[:index]) for index in range(len(sizes))]
        jobs = [(tasks[s : s + n], progress_paths[s : s + n]) for s, n in zip(starts, sizes, strict=True)]
        if len(jobs) == 1:
            return run_slurm_job(*jobs[0])
        return [outcome for outcomes in run_side_by_side(jobs) for outcome in outcomes]


def run_side_by_side(jobs: list[tuple[list[CellTask], list[str]]]) -> list[list[tuple[str, str]]]:
    """Each job (its cells' tasks and progress files) in its own spawned process; a process that
    dies (out of memory) fails its cells alone. Leaving early (submitit requeues the task:
    ``SystemExit``) kills them all."""
    context = multiprocessing.get_context("spawn")
    members = []
    try:
        for index, (tasks, paths) in enumerate(jobs):
            receive, send = context.Pipe(duplex=False)
            process = context.Process(
                target=_side_by_side_job, args=(tasks, paths, os.getpid(), send), name=f"initmem-cell-{index}"
            )
            process.start()
            send.close()
            members.append((process, receive))
        results: list[list[tuple[str, str]]] = [[(FAILED, "")] * len(tasks) for tasks, _ in jobs]
        waiting = {receive: index for index, (_, receive) in enumerate(members)}
        while waiting:
            for ready in cast(list[Connection], wait_for(list(waiting))):  # the ones it was given
                index = waiting.pop(ready)
                try:
                    results[index] = ready.recv()
                except EOFError:  # the process died before it could answer
                    process = members[index][0]
                    process.join()
                    died = f"the cell's process died (exit code {process.exitcode}), e.g. out of memory"
                    results[index] = [(FAILED, died)] * len(jobs[index][0])
        return results
    finally:
        for process, receive in members:
            if process.is_alive():
                process.kill()
            process.join()
            receive.close()


def _side_by_side_job(tasks: list[CellTask], progress_paths: list[str], parent_pid: int, results) -> None:
    """One of a task's k jobs, in its own process: it dies with the task's process, leaves
    Slurm's warning signals to it (Slurm signals every process of the job), and sends back its
    cells' (status, error)."""
    die_with_parent(parent_pid)
    pin_process(process_environment(None))  # the task's GPUs, as Slurm set them; cuBLAS before torch
    for number in (signal.SIGTERM, submitit.JobEnvironment._usr_sig()):
        signal.signal(number, signal.SIG_IGN)
    try:
        result = run_slurm_job(tasks, progress_paths)
    except Exception as error:  # e.g. the tracking server was down: the cells failed, not the task
        result = [(FAILED, f"{type(error).__name__}: {error}")] * len(tasks)
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
        lockstep: str | bool | None = "auto",
        lockstep_max: int = DEFAULT_MAX,
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
        self.lockstep = Lockstep.of(lockstep, lockstep_max, gpu=gpus_per_cell > 0)

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

    def dry_run_lines(self, configs: list, seconds: float) -> list[str]:
        """What ``--lockstep`` would do with these cells (``Lockstep.dry_run_lines``)."""
        return self.lockstep.dry_run_lines(configs, seconds, self.pin)

    def run(self, cells: list, sweep: SweepCells) -> None:
        progress_folder = self.folder / "progress"
        progress_folder.mkdir(parents=True, exist_ok=True)
        executor = self._submitit(f"initmem-{sweep.name}")
        for cell in cells:
            cell.config = fit_to_request(cell.config, self.cpus, self.gpus)
        units: list[list[tuple[Job, ProgressFile]]] = []  # the jobs: a cell, or a fused sigma group
        for unit in self.lockstep.jobs(cells, sweep):
            units.append([])
            for cell in unit:
                job = submit_remote(sweep, cell)  # gives the cell its run id, which names its progress file
                units[-1].append((job, ProgressFile(progress_folder / f"{cell.run_id}.jsonl")))
        waiting = [entry for unit in units for entry in unit]
        groups = [units[start : start + self.packed] for start in range(0, len(units), self.packed)]
        packs = [[entry for unit in group for entry in unit] for group in groups]
        try:
            with executor.batch():  # one array job for the whole sweep, one task per pack of jobs
                slurm_jobs = [
                    executor.submit(
                        SlurmTask([len(unit) for unit in group]),
                        [CellTask(job.cell.config, job.cell.run_id, sweep.uri, sweep.experiment) for job, _ in pack],
                        [str(channel.path) for _, channel in pack],
                    )
                    for group, pack in zip(groups, packs, strict=True)
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
