"""``--executor local``: cells in this process, or in N spawned worker processes on this machine.

With workers, this process stays the tracking store's only writer: each worker sends its
tracker calls and progress through one queue, replayed here into the cell's child run (see
``initmem_core.tracking.cells``), so N workers on one SQLite file lose nothing.
"""

from __future__ import annotations

import concurrent.futures as futures
import ctypes
import functools
import multiprocessing
import os
import queue as queues
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.sweep.executors.base import Job, SweepCells, replay_progress, run_cell


#: Torch threads of a cell that leaves --threads at 0. Fixed, not a share of the machine: a CPU
#: reduction's bits depend on the thread count, so a share would make results depend on --workers.
CELL_THREADS = 1


def pin_threads(config: RunConfig) -> RunConfig:
    return config if config.threads else config.replace(threads=CELL_THREADS)


def for_slot(config: RunConfig, slot: int, gpus: int) -> RunConfig:
    """GPUs round robin between parallel cells (a GPU's results do not depend on which one).
    Only a device left at its default changes; it is not part of the config hash."""
    if config.device == "auto" and gpus > 1:
        return config.replace(device=f"cuda:{slot % gpus}")
    return config


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int) -> None:
    """Whatever kills the sweep (SIGKILL included), the kernel kills this helper or worker too,
    so none is left training, writing checkpoints and holding memory under PID 1 (Linux)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the sweep died before the line above took effect
        os._exit(1)


def start_manager(parent_pid: int) -> None:
    """For the queue's manager process: Ctrl-C is for the sweep, which still drains the queue."""
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_worker(parent_pid: int) -> None:
    """A spawned worker starts bare: it dies with the sweep and warns in one line, as the CLI does."""
    from initmem_core.plugin_system.loader import one_line_warnings

    die_with_parent(parent_pid)
    one_line_warnings()


def run_cell_in_worker(config: RunConfig, run_id: str, queue: Any, staging: str, uri: str,
                       resume: bool = False) -> tuple[str, str]:
    """A worker's task: run one cell, tracking through the queue. Returns (status, error)."""
    from initmem_core.tracking.cells import QueueProgress, QueueTracker

    return run_cell(config, tracker=QueueTracker(queue, run_id, staging, uri), progress=QueueProgress(queue, run_id),
                    resume=resume)


@dataclass
class _InFlight:
    """A cell running in a worker: its job, which slot it holds, which pool runs it."""

    job: Job
    slot: int
    pool: futures.ProcessPoolExecutor


class LocalExecutor:
    """``workers == 1``: cells one after another in this process (plugins registered in this
    process work). More: that many spawned processes, plugins from installed entry points."""

    name = "local"
    remote = False

    def __init__(self, workers: int = 1):
        if workers < 1:
            raise ConfigError(f"--workers must be 1 or greater, got {workers}")
        self.workers = workers

    @staticmethod
    def pin(config: RunConfig) -> RunConfig:
        return pin_threads(config)

    def run(self, cells: list, sweep: SweepCells) -> None:
        if self.workers == 1:
            self._in_process(cells, sweep)
        else:
            self._in_workers(cells, sweep)

    @staticmethod
    def _in_process(cells: list, sweep: SweepCells) -> None:
        for cell in cells:
            cell.config = pin_threads(cell.config)
            job = sweep.submit(cell)
            try:
                _, error = run_cell(cell.config, tracker=job.writer, progress=job.progress, registry=sweep.registry,
                                    resume=cell.resume)
            except KeyboardInterrupt:
                sweep.interrupt([job])
                raise
            sweep.close(job, error)

    def _in_workers(self, cells: list, sweep: SweepCells) -> None:
        """Cells in spawned processes; this process alone writes to the store."""
        from multiprocessing.managers import SyncManager

        context = multiprocessing.get_context("spawn")
        workers, gpus = self.workers, _gpu_count()
        todo = list(cells)
        running: dict[futures.Future, _InFlight] = {}
        manager = SyncManager(ctx=context)
        manager.start(start_manager, (os.getpid(),))
        with manager, tempfile.TemporaryDirectory(prefix="initmem-sweep-") as staging:
            events = manager.Queue()
            new_pool = functools.partial(futures.ProcessPoolExecutor, workers, mp_context=context,
                                         initializer=start_worker, initargs=(os.getpid(),))
            pool = new_pool()
            try:
                while todo or running:
                    free = sorted(set(range(workers)) - {flight.slot for flight in running.values()})
                    while todo and free:
                        cell, slot = todo.pop(0), free.pop(0)
                        cell.config = for_slot(pin_threads(cell.config), slot, gpus)
                        job = sweep.submit(cell)
                        future = pool.submit(run_cell_in_worker, cell.config, cell.run_id, events, staging, sweep.uri,
                                             cell.resume)
                        running[future] = _InFlight(job, slot, pool)
                    # A future that is done has put all its events: drain first, then close its cell.
                    done = [f for f in running if f.done()]
                    _drain(events, {flight.job.cell.run_id: flight.job for flight in running.values()}, wait=not done)
                    for future in done:
                        flight = running.pop(future)
                        try:
                            _, error = future.result()
                        except futures.process.BrokenProcessPool as broken:  # a worker died, e.g. out of memory
                            error = f"worker process died: {broken}"
                            if flight.pool is pool:
                                pool.shutdown(wait=False)
                                pool = new_pool()
                        sweep.close(flight.job, error)
            except KeyboardInterrupt:
                sweep.interrupt(flight.job for flight in running.values())
                raise
            finally:  # after Ctrl-C, do not wait for the cells still running
                pool.shutdown(wait=not running, cancel_futures=True)


def _drain(events, jobs: dict[str, Job], wait: bool) -> None:
    """Replay every queued event into its child's writer (or its progress bar)."""
    from initmem_core.tracking.cells import TRACKER_CALLS

    try:
        event = events.get(timeout=0.2) if wait else events.get_nowait()
        while True:
            run_id, call, args = event
            job = jobs[run_id]
            if call in TRACKER_CALLS:
                getattr(job.writer, call)(*args)
                if call == "log_artifact":
                    Path(args[0]).unlink()
            else:
                replay_progress(job, call, args)
            event = events.get_nowait()
    except queues.Empty:
        return


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
