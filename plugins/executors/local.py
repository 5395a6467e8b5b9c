"""``--executor local``: cells in this process, or in N spawned worker processes on this machine.

With workers, this process stays the tracking store's only writer: each worker's tracker calls
and progress come through one queue (``QueueTracker``, ``QueueProgress``). On a GPU machine each
worker process keeps one GPU for its whole life (``placement``); a cell left at ``--device auto``
runs on it.
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import ctypes
import multiprocessing
import multiprocessing.context
import os
import pickle
import queue as queues
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError, InitmemError
from initmem_core.plugin_system.loader import one_line_warnings
from initmem_core.sweep.executor import Executor, Job, SweepCells, run_cell
from initmem_core.tracking.client import python_handles_ctrl_c
from initmem_core.tracking.tracker import ForwardedCalls
from initmem_core.vocabulary import FAILED, FINISHED
from initmem_plugins.executors.lockstep import DEFAULT_MAX, Lockstep
from initmem_plugins.executors.placement import pin_process, visible_gpus, worker_environments
from initmem_plugins.executors.scratch import ScratchFolder

PROGRESS_INTERVAL_S = 0.25  # advance() is called every step; the queue needs far fewer messages
#: Torch threads of a cell that leaves --threads at 0. Fixed, not a share of the machine: a CPU
#: reduction's bits depend on the thread count, so a share would make results depend on --workers.
CELL_THREADS = 1


def pin_threads(config: RunConfig) -> RunConfig:
    return config if config.threads else config.replace(threads=CELL_THREADS)


def check_devices(cells: list, workers: int, gpus: list[str]) -> None:
    """A pinned worker sees one GPU, as ``cuda:0``: a cell asking for ``cuda:N`` (N > 0) would
    fail there. ``auto``, ``cuda``, ``cuda:0`` and ``cpu`` run as asked."""
    asked = sorted(
        {
            cell.config.device
            for cell in cells
            if cell.config.device.startswith("cuda:") and cell.config.device != "cuda:0"
        }
    )
    if gpus and asked:
        raise ConfigError(
            f"--device {', '.join(asked)} with --workers {workers}: each worker process sees one GPU "
            f"of the {len(gpus)} here, as cuda:0; leave --device at auto (the workers spread over the "
            "GPUs), or pick a GPU with --workers 1 or CUDA_VISIBLE_DEVICES"
        )


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int) -> None:
    """Whatever kills the sweep (SIGKILL included), the kernel kills this helper or worker too,
    so none is left training, writing checkpoints and holding memory under PID 1 (Linux)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the sweep died before the line above took effect
        os._exit(1)


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """A Ctrl-C inside is held until the block is done, then raised: while a worker is spawned
    it would leave the start half-done. For blocks of milliseconds."""
    if not python_handles_ctrl_c():
        yield
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


class QuietStartProcess(multiprocessing.context.SpawnProcess):
    """A spawned process that starts with Ctrl-C blocked: one pressed while Python starts it
    (importing ``site``, reading its task) waits instead of printing a KeyboardInterrupt traceback
    there, and is dropped by ``leave_ctrl_c_to_the_sweep``. The sweep blocks SIGINT only for the
    start, a mask the child keeps across exec (a handler it would not); one that comes meanwhile
    waits too, and is raised in the sweep once the start is done: none is lost (SIG_IGN lost them)."""

    def start(self) -> None:
        from multiprocessing import resource_tracker

        # Started here if need be: it unblocks SIGINT once it has started its own process.
        resource_tracker.ensure_running()
        # Held too: taken by another thread of the sweep, it would interrupt the start half-way.
        with ctrl_c_held():
            before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                super().start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, before)


class QuietStartContext(multiprocessing.context.SpawnContext):
    """multiprocessing's spawn, whose processes start with Ctrl-C blocked (``QuietStartProcess``)."""

    Process = QuietStartProcess


def leave_ctrl_c_to_the_sweep() -> None:
    """Ctrl-C reaches the whole terminal group: it is the sweep's to handle (a cell's run still
    stops on it, with StopSignals). Ignored from here on, then let through: one that came while
    this process started (blocked, ``QuietStartProcess``) is dropped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def start_manager(parent_pid: int) -> None:
    """For the queue's manager process: Ctrl-C is for the sweep, which still drains the queue."""
    die_with_parent(parent_pid)
    leave_ctrl_c_to_the_sweep()


def start_worker(parent_pid: int, environment: dict[str, str]) -> None:
    """A spawned worker starts bare: it dies with the sweep, takes its GPU (``environment``,
    before torch is imported) and warns in one line, as the CLI does. It imports torch and the
    training code at once, while the sweep opens the store."""
    die_with_parent(parent_pid)
    leave_ctrl_c_to_the_sweep()  # a worker importing torch would print a traceback on Ctrl-C
    pin_process(environment)

    one_line_warnings()
    import torch  # noqa: F401  (the bulk of a cell's start-up)

    import initmem_core.training.loop  # noqa: F401  # lazy: imports torch (a worker loads it before its first cell)
    import initmem_core.training.setup  # noqa: F401  # lazy: imports torch


#: Calls a worker may send, and so the only ones the sweep process replays.
TRACKER_CALLS = frozenset(
    {"start_run", "resume_run", "log_metrics", "set_tags", "log_text", "log_artifact", "log_dataset", "end_run"}
)
PROGRESS_CALLS = frozenset({"start", "advance", "epoch_done"})  # a worker's QueueProgress


class QueueTracker(ForwardedCalls):
    """The ``Tracker`` protocol for a worker process: every call goes to the sweep process.

    Artifact files are copied into the sweep's staging folder first, since ``run`` deletes its
    temporary files before the sweep process gets to replay the call. ``uri`` names the store
    (never opened here) so that ``run`` keeps checkpoints beside it, as it does in-process.
    """

    uri: str

    def __init__(self, queue: Any, run_id: str, staging: str | Path, uri: str):
        self.queue, self.run_id, self.staging, self.uri = queue, run_id, Path(staging), uri

    def _forward(self, call: str, *args: Any) -> None:
        self.queue.put((self.run_id, call, args))

    def start_run(self, name, params, tags):
        self._forward("start_run", name, dict(params), dict(tags))
        return self.run_id

    def resume_run(self, run_id):
        self._forward("resume_run", run_id)

    def log_artifact(self, local_path, artifact_path=None):
        source = Path(local_path)
        staged = self.staging / uuid.uuid4().hex / source.name
        staged.parent.mkdir(parents=True)
        shutil.copy2(source, staged)
        self._forward("log_artifact", str(staged), artifact_path)

    def end_run(self, status=FINISHED):
        self._forward("end_run", status)


class QueueProgress:
    """The training ``Progress`` protocol for a worker; step counts are batched. ``queue`` is
    anything with ``put``: a multiprocessing queue, a Ray queue, a file on a shared disk."""

    def __init__(self, queue: Any, run_id: str, interval_s: float = PROGRESS_INTERVAL_S):
        self.queue, self.run_id, self.interval_s = queue, run_id, interval_s
        self.pending, self.last = 0, 0.0

    def _send(self, call: str, *args: Any) -> None:
        self.queue.put((self.run_id, call, args))

    def start(self, epochs, steps_per_epoch):
        self._send("start", epochs, steps_per_epoch)

    def advance(self, steps):
        self.pending += steps
        if time.monotonic() - self.last >= self.interval_s:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self._send("advance", self.pending)
            self.pending, self.last = 0, time.monotonic()

    def epoch_done(self, epoch, metrics):
        self.flush()
        self._send("epoch_done", epoch, {k: float(v) for k, v in metrics.items()})


def replay_progress(job: Job, call: str, args: Any) -> None:
    """A progress event a worker sent (``QueueProgress``), onto the cell's bar."""
    if job.progress is not None and call in PROGRESS_CALLS:
        getattr(job.progress, call)(*args)


def run_cell_in_worker(
    config: RunConfig, run_id: str, queue: Any, staging: str, uri: str, resume: bool = False
) -> tuple[str, str]:
    """A worker's task: run one cell, tracking through the queue. Returns (status, error).
    ``queue`` may come pickled (bytes): rebuilt here, a queue whose manager died is said so, where
    rebuilding it as the task's arguments are read would end the worker with a traceback."""
    if isinstance(queue, bytes):
        try:
            queue = pickle.loads(queue)  # connects to the queue's manager process
        except (EOFError, ConnectionError) as gone:
            return FAILED, f"the sweep's queue process is gone: {gone}"
    return run_cell(
        config, tracker=QueueTracker(queue, run_id, staging, uri), progress=QueueProgress(queue, run_id), resume=resume
    )


def run_lockstep_in_worker(
    configs: list[RunConfig], run_ids: list[str], queue: Any, staging: str, uri: str, resume: list[bool]
) -> list[tuple[str, str]]:
    """A worker's task for a fused job (``lockstep_job``): its cells' (status, error) each."""
    if isinstance(queue, bytes):
        try:
            queue = pickle.loads(queue)
        except (EOFError, ConnectionError) as gone:
            return [(FAILED, f"the sweep's queue process is gone: {gone}")] * len(configs)
    from initmem_plugins.executors.lockstep_job import run_lockstep  # lazy: imports torch

    trackers = [QueueTracker(queue, run_id, staging, uri) for run_id in run_ids]
    return run_lockstep(configs, trackers, [QueueProgress(queue, run_id) for run_id in run_ids], resume=resume)


def run_job(cells: list, jobs: list[Job], sweep: SweepCells) -> list[tuple[str, str]]:
    """One job in this process: a lone cell, or a fused one (each cell its own writer)."""
    if len(jobs) == 1:
        cell, job = cells[0], jobs[0]
        options = {"tracker": job.writer, "progress": job.progress, "registry": sweep.registry, "resume": cell.resume}
        return [run_cell(cell.config, **options)]
    from initmem_plugins.executors.lockstep_job import run_lockstep  # lazy: imports torch

    return run_lockstep(
        [cell.config for cell in cells],
        [job.writer for job in jobs],
        [job.progress for job in jobs],
        registry=sweep.registry,
        resume=[cell.resume for cell in cells],
    )


@dataclass
class _InFlight:
    """A job running in a worker: its cells' jobs, which slot it holds, which pool (that slot's) runs it."""

    jobs: list[Job]
    slot: int
    pool: futures.ProcessPoolExecutor


class _Workers:
    """The worker processes, the queue they report through and the folder their artifact files
    are staged in. Started as soon as the sweep knows it needs them: every worker imports torch
    and the training code (``start_worker``) while the sweep process opens the store.

    One single-process pool per slot: the slot's worker keeps the slot's GPU (``environments``),
    and the worker that replaces a dead one (``replace``) gets the same GPU."""

    def __init__(self, workers: int, gpus: list[str]):
        from multiprocessing.managers import SyncManager

        self.workers, self.gpus = workers, gpus
        self.environments = worker_environments(workers, gpus)
        self.context = QuietStartContext()
        # First: the manager listens in it, and a killed sweep's is removed by the next (scratch.py).
        self.staging = ScratchFolder()
        self.manager = SyncManager(address=self.staging.socket, ctx=self.context)
        try:
            self.manager.start(start_manager, (os.getpid(),))
            self.events = self.manager.Queue()
        except (EOFError, ConnectionError):  # killed as it started
            self._end_manager()
            raise InitmemError(QUEUE_GONE) from None
        except KeyboardInterrupt:  # ended before it answers: it would write to a pipe nobody reads
            self._end_manager()
            raise
        self.pools = [self.new_pool(slot) for slot in range(workers)]

    def new_pool(self, slot: int) -> futures.ProcessPoolExecutor:
        pool = futures.ProcessPoolExecutor(
            1, mp_context=self.context, initializer=start_worker, initargs=(os.getpid(), self.environments[slot])
        )
        pool.submit(int)  # a first task makes the pool start its worker now (it starts it on demand)
        return pool

    def replace(self, slot: int) -> None:
        """The slot's worker died: a new one, on the same GPU."""
        self.pools[slot].shutdown(wait=False)
        self.pools[slot] = self.new_pool(slot)

    def _end_manager(self) -> None:
        process = getattr(self.manager, "_process", None)
        if process is not None and process.is_alive():
            process.kill()
            process.join(timeout=5)
        self.staging.cleanup()

    def queue_alive(self) -> bool:
        process = getattr(self.manager, "_process", None)
        return process is None or process.is_alive()

    def close(self, unused: bool = False) -> None:
        """Every cell has ended or been given up (Ctrl-C): the workers exit while the sweep
        writes its report, and die with it if it is quicker. ``unused``: no cell ever ran in
        them (the sweep ended before its first, a Ctrl-C as they start): killed, where the sweep's
        exit would wait for each to finish importing torch (seconds) while it ignores Ctrl-C."""
        for pool in self.pools:
            if unused:
                for process in list((getattr(pool, "_processes", None) or {}).values()):
                    process.kill()
            pool.shutdown(wait=False, cancel_futures=True)
        self.manager.shutdown()
        self.staging.cleanup()


class LocalExecutor(Executor):
    """``workers == 1``: cells one after another in this process (plugins registered in this
    process work). More: that many spawned processes, plugins from installed entry points."""

    name = "local"
    remote = False

    def __init__(self, workers: int = 1, lockstep: str | bool | None = "auto", lockstep_max: int = DEFAULT_MAX):
        if workers < 1:
            raise ConfigError(f"--workers must be 1 or greater, got {workers}")
        self.workers = workers
        self.lockstep = Lockstep.of(lockstep, lockstep_max)
        self._started: _Workers | None = None
        self._gpus: list[str] | None = None

    def dry_run_lines(self, configs: list[RunConfig], seconds: float) -> list[str]:
        """What ``--lockstep`` would do with these cells (``Lockstep.dry_run_lines``)."""
        return self.lockstep.dry_run_lines(configs, seconds, pin_threads)

    def gpus(self) -> list[str]:
        """The GPUs the workers are spread over (counted once, without torch)."""
        if self._gpus is None:
            self._gpus = visible_gpus()
        return self._gpus

    @staticmethod
    def pin(config: RunConfig) -> RunConfig:
        return pin_threads(config)

    def start(self) -> None:
        """Start the worker processes now, before the sweep opens the store (``run_sweep`` calls
        this when there are cells to run); ``run`` would start them otherwise."""
        if self.workers > 1 and self._started is None:
            self._started = _Workers(self.workers, self.gpus())

    def stop(self) -> None:
        """Stop workers started but never used (the sweep failed before its first cell)."""
        if self._started is not None:
            self._started.close(unused=True)
            self._started = None

    def run(self, cells: list, sweep: SweepCells) -> None:
        for cell in cells:
            cell.config = pin_threads(cell.config)
        jobs = self.lockstep.jobs(cells, sweep)
        if self.workers == 1:
            self._in_process(jobs, sweep)
        else:
            self._in_workers(jobs, sweep)

    @staticmethod
    def _in_process(units: list[list], sweep: SweepCells) -> None:
        for cells in units:
            jobs = [sweep.submit(cell) for cell in cells]
            try:
                outcomes = run_job(cells, jobs, sweep)
            except KeyboardInterrupt:
                sweep.interrupt(jobs)
                raise
            for job, (_, error) in zip(jobs, outcomes, strict=True):
                sweep.close(job, error)

    def _in_workers(self, units: list[list], sweep: SweepCells) -> None:
        """Jobs (a cell, or a fused sigma group) in spawned processes; this process alone writes
        to the store."""
        check_devices([cell for cells in units for cell in cells], self.workers, self.gpus())
        self.start()
        started, self._started = self._started, None
        assert started is not None
        workers, events = self.workers, started.events
        queue = pickle.dumps(events)  # rebuilt by each task (run_cell_in_worker)
        todo = list(units)
        running: dict[futures.Future, _InFlight] = {}
        try:
            while todo or running:
                free = sorted(set(range(workers)) - {flight.slot for flight in running.values()})
                while todo and free:
                    cells, slot = todo.pop(0), free.pop(0)
                    jobs = [sweep.submit(cell) for cell in cells]
                    pool = started.pools[slot]
                    staging = started.staging.name
                    # a lone cell's (status, error), or a fused job's, one per cell
                    future: futures.Future[tuple[str, str] | list[tuple[str, str]]]
                    try:
                        if len(cells) == 1:
                            cell = cells[0]
                            future = pool.submit(
                                run_cell_in_worker, cell.config, cell.run_id, queue, staging, sweep.uri, cell.resume
                            )
                        else:
                            future = pool.submit(
                                run_lockstep_in_worker,
                                [cell.config for cell in cells],
                                [cell.run_id for cell in cells],
                                queue,
                                staging,
                                sweep.uri,
                                [cell.resume for cell in cells],
                            )
                    except futures.process.BrokenProcessPool as broken:  # its worker died while idle
                        future = futures.Future()
                        future.set_exception(broken)
                    running[future] = _InFlight(jobs, slot, pool)
                # A future that is done has put all its events: drain first, then close its cell.
                done = [f for f in running if f.done()]
                if done and not started.queue_alive():  # what the cells put since is lost: resume them
                    raise QueueGone()
                out = {job.cell.run_id: job for flight in running.values() for job in flight.jobs}
                _drain(events, out, wait=not done)
                for future in done:
                    flight = running.pop(future)
                    try:
                        result = future.result()
                        errors = [error for _, error in (result if isinstance(result, list) else [result])]
                    except futures.process.BrokenProcessPool as broken:  # a worker died, e.g. out of memory
                        errors = [f"worker process died: {broken}"] * len(flight.jobs)
                        if flight.pool is started.pools[flight.slot]:
                            started.replace(flight.slot)
                    for job, error in zip(flight.jobs, errors, strict=True):
                        sweep.close(job, error)
        except KeyboardInterrupt:
            sweep.interrupt(job for flight in running.values() for job in flight.jobs)
            raise
        except QueueGone:
            sweep.interrupt(job for flight in running.values() for job in flight.jobs)
            raise InitmemError(QUEUE_GONE) from None
        finally:
            started.close()


QUEUE_GONE = (
    "the sweep's queue process, which carries its workers' tracking, died (killed, or out of memory); "
    "its running cells were stopped: launch the sweep again to resume them"
)


class QueueGone(Exception):
    """The queue's manager process died: nothing more reaches the sweep from its workers."""


def _next_event(events, wait: bool) -> Any:
    try:
        return events.get(timeout=0.2) if wait else events.get_nowait()
    except (EOFError, ConnectionError) as gone:  # its manager is gone
        raise QueueGone() from gone


def _drain(events, jobs: dict[str, Job], wait: bool) -> None:
    """Replay every queued event into its child's writer (or its progress bar)."""
    try:
        event = _next_event(events, wait)
        while True:
            run_id, call, args = event
            job = jobs[run_id]
            if call in TRACKER_CALLS:
                getattr(job.writer, call)(*args)
                if call == "log_artifact":
                    Path(args[0]).unlink()
            else:
                replay_progress(job, call, args)
            event = _next_event(events, wait=False)
    except queues.Empty:
        return
