"""``--executor ray``: each cell is one Ray task with its own resource request; with
``--lockstep``, each fused sigma group is one task (one cell's request) training its cells as one
model, each into its own child run (``lockstep``, ``remote_cell.run_remote_job``).

Ray schedules the tasks over the cluster (``--ray-address``), or over a Ray instance started
here for the sweep (no address). A task whose worker process died (killed, out of memory, node
lost) is run again by Ray, up to ``max_retries`` times, into the same child runs, each cell
resuming from its checkpoint (see ``remote_cell``); a cell that raises is not retried: it
failed. Progress comes back through a Ray queue, so the display is the same as with local workers.

GPUs: a task that asks for some runs alone in its worker process (``RayExecutor.remote_task``)
and sees only the GPUs Ray assigned it, so ``--gpus-per-cell 0.25`` shares one GPU between four
cells, each in its own process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from initmem_core.errors import ConfigError, InitmemError
from initmem_core.sweep.executor import Executor, Job, SweepCells
from initmem_core.tracking.client import store_must_answer
from initmem_core.tracking.login import CREDENTIAL_ENV
from initmem_plugins.executors.local import QueueProgress, replay_progress
from initmem_plugins.executors.lockstep import DEFAULT_MAX, Lockstep
from initmem_plugins.executors.placement import pin_process, process_environment
from initmem_plugins.executors.remote_cell import (
    CellTask,
    fit_to_request,
    run_remote_job,
    submit_remote,
    wait_for_server,
)

POLL_S = 0.2
CLUSTER_CHECK_S = 10.0  # how often the sweep asks the head whether its cluster still exists
CLUSTER_LOST_S = 120.0  # a head that has not answered for this long is gone
STORE_WAIT_S = 120.0  # how long closing a cell waits for a tracking server that is restarting


RESTARTED = "its head restarted, and the new head does not know this sweep's tasks"


class ClusterLost(InitmemError):
    """The Ray cluster the sweep joined is gone (its head restarted, or silent): its tasks with it."""


class ClusterWatch:
    """Whether the cluster this sweep joined still exists. Ray's driver does not notice that the
    head restarted: a new head on the same address is a new cluster that never heard of the
    sweep's tasks, and ``ray.wait`` waits for them forever (the cluster chaos soak, issue 48). The
    head's GCS answers this driver's requests with ``AuthenticationError`` (WrongClusterID) then."""

    def __init__(self, gcs: Any, clock: Any = time.monotonic):
        self.gcs, self.clock = gcs, clock
        self.next_check, self.silent_since = clock() + CLUSTER_CHECK_S, None

    def lost(self) -> str | None:
        """Why the cluster is gone, or None (checked every ``CLUSTER_CHECK_S`` at most)."""
        from ray.exceptions import AuthenticationError

        now = self.clock()
        if self.gcs is None or now < self.next_check:  # None: a Ray without a GCS client (a test's fake)
            return None
        self.next_check = now + CLUSTER_CHECK_S
        try:
            self.gcs.get_all_node_info(timeout=5)
        except AuthenticationError:
            return RESTARTED
        except Exception:  # unreachable, or timed out: the head may be restarting, or just slow
            self.silent_since = self.silent_since or now
            if now - self.silent_since >= CLUSTER_LOST_S:
                return f"its head has not answered for {now - self.silent_since:.0f} s"
            return None
        self.silent_since = None
        return None


def credentials_env() -> dict[str, str]:
    """The login variables that are set here (``CREDENTIAL_ENV``), for a worker that does not
    inherit this process's environment (a Ray task). Never to be logged or printed."""
    return {key: os.environ[key] for key in CREDENTIAL_ENV if os.environ.get(key)}


@contextlib.contextmanager
def logged_in(login: dict[str, str]) -> Iterator[None]:
    """Requests to the tracking server log in with ``login`` (``credentials_env`` of the process
    that launched this work) while inside; the variables are as they were afterwards."""
    before = {key: os.environ.get(key) for key in login}
    os.environ.update(login)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _ray_job(
    tasks: list[CellTask], events: Any, uses_gpus: bool = False, login: dict[str, str] | None = None
) -> list[tuple[str, str]]:
    """The Ray task: a job (one cell, or a fused sigma group), each cell's progress sent to the
    sweep through ``events``; returns each cell's (status, error). With GPUs it sees those Ray
    assigned it and no other, set before torch starts CUDA here. ``login``: the tracking server's
    login variables of the launching shell (a worker of a cluster started elsewhere lacks them),
    set while the cells run. They come as an argument, not as the task's runtime environment,
    which Ray writes into its logs."""
    if uses_gpus:
        import ray

        pin_process(process_environment([str(gpu) for gpu in ray.get_gpu_ids()]))
    with logged_in(login or {}):
        return run_remote_job(tasks, [QueueProgress(events, task.run_id) for task in tasks])


class RayExecutor(Executor):
    name = "ray"
    remote = True

    def __init__(
        self,
        address: str | None = None,
        cpus_per_cell: float = 1.0,
        gpus_per_cell: float = 0.0,
        max_retries: int = 3,
        lockstep: str | bool | None = "auto",
        lockstep_max: int = DEFAULT_MAX,
    ):
        if cpus_per_cell <= 0 or gpus_per_cell < 0 or max_retries < 0:
            raise ConfigError("--cpus-per-cell must be above 0, --gpus-per-cell and --max-retries 0 or more")
        self.address, self.cpus, self.gpus, self.max_retries = address, cpus_per_cell, gpus_per_cell, max_retries
        self.lockstep = Lockstep.of(lockstep, lockstep_max, gpu=gpus_per_cell > 0)

    def pin(self, config):
        return fit_to_request(config, self.cpus, self.gpus)

    def dry_run_lines(self, configs: list, seconds: float) -> list[str]:
        """What ``--lockstep`` would do with these cells (``Lockstep.dry_run_lines``)."""
        return self.lockstep.dry_run_lines(configs, seconds, self.pin)

    def run(self, cells: list, sweep: SweepCells) -> None:
        import ray
        from ray.exceptions import RayError
        from ray.util.queue import Queue

        ours = self._connect()
        try:
            # Bookkeeping: takes no cell's CPU; restarted (empty) by Ray if its node is lost.
            events = Queue(actor_options={"num_cpus": 0, "max_restarts": -1})
            try:
                self._run_tasks(cells, sweep, events)
            finally:
                with contextlib.suppress(RayError):  # its node, or the cluster, may be gone
                    events.shutdown()
        finally:
            if ours:
                ray.shutdown()

    def remote_task(self) -> Any:
        """A job as a Ray remote function with one cell's resource request (a fused job's too:
        its K models train as one, where one cell would). A GPU task runs
        alone in its worker process (``max_calls=1``): Ray sets CUDA_VISIBLE_DEVICES before each
        task, but CUDA reads it once per process, so a reused worker would run the next cell on
        the last cell's GPU. ``max_calls`` is taken from ``ray.remote`` only (Ray drops it
        from ``.options()``), so the request goes there."""
        import ray

        options: dict[str, Any] = {
            "num_cpus": self.cpus,
            "num_gpus": self.gpus,
            "max_retries": self.max_retries,
            "retry_exceptions": False,
        }
        try:
            ray.remote(_ray_job).options(**options)  # Ray checks the request here
        except ValueError as error:  # e.g. a fractional GPU count above 1
            raise ConfigError(f"--cpus-per-cell/--gpus-per-cell: {error}") from None
        if self.gpus:
            options["max_calls"] = 1
        return ray.remote(**options)(_ray_job)

    def _run_tasks(self, cells: list, sweep: SweepCells, events: Any) -> None:
        import ray
        from ray.exceptions import AuthenticationError

        task = self.remote_task()
        jobs: dict[Any, list[Job]] = {}  # a task -> its cells' jobs

        def unfinished() -> Iterator[Job]:
            return (job for unit in jobs.values() for job in unit)

        watch = ClusterWatch(getattr(ray._private.worker.global_worker, "gcs_client", None))  # set by ray.init
        for cell in cells:
            cell.config = fit_to_request(cell.config, self.cpus, self.gpus)
        try:
            for unit in self.lockstep.jobs(cells, sweep):
                wait_for_server(sweep.uri)  # handing out many cells takes minutes: a restart ended it
                submitted = [submit_remote(sweep, cell) for cell in unit]
                ref = task.options(name=task_name(unit)).remote(
                    [CellTask(cell.config, cell.run_id, sweep.uri, sweep.experiment) for cell in unit],
                    LossyEvents(events),
                    self.gpus > 0,
                    credentials_env(),
                )
                jobs[ref] = submitted
            while jobs:
                ready, _ = ray.wait(list(jobs), num_returns=len(jobs), timeout=POLL_S)
                # A ready task has put all its events: replay them first, then close its cells.
                _drain(events, {job.cell.run_id: job for job in unfinished()})
                for ref in ready:
                    unit = jobs.pop(ref)
                    for job, error in zip(unit, _errors_of(ref, len(unit)), strict=True):
                        close_cell(sweep, job, error)
                if jobs and (why := watch.lost()):
                    raise ClusterLost(self._lost(why))
        except ClusterLost:  # its tasks went with it; asking Ray to cancel them can crash this process
            interrupt_cells(sweep, unfinished())
            raise
        except AuthenticationError:  # a call to a head that restarted meanwhile (submitting a cell)
            interrupt_cells(sweep, unfinished())
            raise ClusterLost(self._lost(RESTARTED)) from None
        except BaseException:  # Ctrl-C, or this process failing: no cell should run on unwatched
            for ref in jobs:
                ray.cancel(ref, force=True)
            interrupt_cells(sweep, unfinished())
            raise

    def _lost(self, why: str) -> str:
        return (
            f"lost the Ray cluster at {self.address or 'this machine'}: {why}; launch the same command "
            "again once the cluster is up, to resume the sweep"
        )

    def _connect(self) -> bool:
        """Join the cluster, or start a Ray instance here; ``False`` if this process already
        had Ray running (then it is the caller's, and stays up)."""
        import ray

        if ray.is_initialized():
            return False
        if self.address is None:
            # address="local": a new instance even if another one runs on this machine.
            ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING)
            return True
        try:
            ray.init(address=self.address, logging_level=logging.WARNING)
        except (ConnectionError, ValueError) as error:
            first_line = str(error).strip().splitlines()[0]
            raise ConfigError(
                f"cannot join the Ray cluster at {self.address}: {first_line}; check --ray-address "
                "(a cluster with token authentication also needs RAY_AUTH_MODE=token and its "
                "token here, see docs/distributed.md)"
            ) from None
        return True


def close_cell(sweep: SweepCells, job: Job, error: str) -> None:
    """``sweep.close``, waiting out a tracking server that is restarting: reading a cell's end from
    a server killed mid-answer raised MLflow's exception (IncompleteRead) out of the sweep, with a
    traceback (the cluster chaos soak, issue 48). One line after ``STORE_WAIT_S``."""
    deadline = time.monotonic() + STORE_WAIT_S
    while True:
        try:
            return sweep.close(job, error)
        except InitmemError:
            raise
        except Exception:
            if time.monotonic() < deadline:
                time.sleep(2.0)
                continue
            with store_must_answer(sweep.uri):  # the error as one line, with exit 2
                raise


def interrupt_cells(sweep: SweepCells, jobs: Any) -> None:
    """Mark the cells still out KILLED, each one that the store takes: the sweep is ending on
    another error, which a store that is down would hide behind its own traceback. A cell left
    RUNNING is run again by the next launch."""
    for job in jobs:
        with contextlib.suppress(Exception):
            sweep.interrupt([job])


class LossyEvents:
    """The tasks' end of the progress queue. Progress is for the display: an event the queue's
    actor cannot take now (its node lost, the actor restarting) is dropped, not raised in the
    cell, which would fail it."""

    def __init__(self, queue: Any):
        self.queue = queue

    def put(self, item: Any) -> None:
        from ray.exceptions import RayError

        with contextlib.suppress(RayError):
            self.queue.put(item)


def _drain(events: Any, jobs: dict[str, Job]) -> None:
    """Replay the progress events waiting in ``events``; none while its actor is unavailable
    (its node lost: Ray restarts it), which once ended the sweep with a traceback."""
    from ray.exceptions import RayError

    try:
        waiting = events.size()
        batch = events.get_nowait_batch(waiting) if waiting else []
    except RayError:
        return
    for run_id, call, args in batch:
        if run_id in jobs:  # else a worker Ray gave up on (a lost node) still reports a closed cell
            replay_progress(jobs[run_id], call, args)


def task_name(cells: list) -> str:
    """A task's name in Ray's dashboard: its cell's run name, or a fused job's first and count."""
    first = cells[0].config.run_name()
    return f"initmem {first}" if len(cells) == 1 else f"initmem lockstep {first} +{len(cells) - 1}"


def _errors_of(ref: Any, cells: int) -> list[str]:
    """Each cell's '' if the task returned (its run is ended in the store), else why Ray gave up on it."""
    import ray
    from ray.exceptions import RayError, RayTaskError

    try:
        return [error for _, error in ray.get(ref)]
    except RayTaskError as error:  # raised in the task before or after training, e.g. the server was down
        cause = error.cause
        return [f"{type(cause).__name__}: {cause}"] * cells
    except RayError as error:  # the worker died more often than --max-retries allows, or its node is gone
        lines = str(error).strip().splitlines()
        return [f"{type(error).__name__}: {lines[0] if lines else 'the Ray task failed'}"] * cells
