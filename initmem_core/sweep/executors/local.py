"""``--executor local``: cells in this process, or in N spawned worker processes on this machine.

With workers, this process stays the tracking store's only writer: each worker sends its
tracker calls and progress through one queue, replayed here into the cell's child run (see
``cell_tracking``), so N workers on one SQLite file lose nothing.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import os
import queue as queues
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.sweep.executors.base import Job, SweepCells, replay_progress, run_cell


def for_slot(config: RunConfig, slot: int, workers: int, cpus: int, gpus: int) -> RunConfig:
    """Divide the machine between parallel cells: CPU threads evenly, GPUs round robin.

    Only knobs left at their defaults change, and neither is part of the config hash.
    """
    changes: dict[str, Any] = {}
    if config.threads == 0:
        changes["threads"] = max(1, cpus // workers)
    if config.device == "auto" and gpus > 1:
        changes["device"] = f"cuda:{slot % gpus}"
    return config.replace(**changes) if changes else config


def ignore_sigint() -> None:
    """For the queue's manager process: Ctrl-C is for the sweep, which still drains the queue."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


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

    def run(self, cells: list, sweep: SweepCells) -> None:
        if self.workers == 1:
            self._in_process(cells, sweep)
        else:
            self._in_workers(cells, sweep)

    @staticmethod
    def _in_process(cells: list, sweep: SweepCells) -> None:
        for cell in cells:
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
        workers, gpus, cpus = self.workers, _gpu_count(), os.cpu_count() or 1
        todo = list(cells)
        running: dict[futures.Future, _InFlight] = {}
        manager = SyncManager(ctx=context)
        manager.start(ignore_sigint)
        with manager, tempfile.TemporaryDirectory(prefix="initmem-sweep-") as staging:
            events = manager.Queue()
            pool = futures.ProcessPoolExecutor(workers, mp_context=context)
            try:
                while todo or running:
                    free = sorted(set(range(workers)) - {flight.slot for flight in running.values()})
                    while todo and free:
                        cell, slot = todo.pop(0), free.pop(0)
                        cell.config = for_slot(cell.config, slot, workers, cpus, gpus)
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
                                pool = futures.ProcessPoolExecutor(workers, mp_context=context)
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
