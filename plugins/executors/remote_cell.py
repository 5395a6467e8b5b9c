"""What a Ray task or a Slurm job runs: one cell, or a lockstep sigma group trained as one fused
model (``run_remote_job``), each cell written straight into its child run on the tracking server
(``ServerCellWriter``), safe to run again for the same cells: an attempt resumes each cell from
its newest checkpoint when it belongs to that run (a shared checkpoint folder, or the same
machine), otherwise trains its config from the start, and leaves a cell an earlier attempt ended
(finished, or diverged) as it is.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.loader import get_registry
from initmem_core.sweep.executor import Job, SweepCells, run_cell
from initmem_core.tracking.cells import quiet_run_links
from initmem_core.tracking.tracker import MlflowTracker
from initmem_core.tracking.writing import log_params, log_tags
from initmem_core.training.plan import checkpoint_folder
from initmem_core.training.resume import find_resumable
from initmem_core.vocabulary import (
    ATTEMPTS_TAG,
    DIVERGED_TAG,
    FAILED,
    FAILURE_REASON_TAG,
    FINISHED,
    RUNNING,
    WORKER_TAG,
)
from initmem_plugins.executors.lockstep import plan_lockstep

STORE_WAIT_S = 120.0  # how long a cell waits at its start for a tracking server that is restarting


@dataclass(frozen=True)
class CellTask:
    """All a remote worker gets: the cell's config and the child run to write it into."""

    config: RunConfig
    run_id: str
    uri: str
    experiment: str


def fit_to_request(config: RunConfig, cpus: float, gpus: float) -> RunConfig:
    """A cell uses what it asked the scheduler for: torch's threads as its CPUs, and no GPU if it
    asked for none (Ray leaves every GPU visible to a task that asked for none: ``auto`` would
    take one that another cell holds).
    Only knobs left at their defaults change, and neither is part of the config hash."""
    changes: dict[str, Any] = {}
    if config.threads == 0:
        changes["threads"] = max(1, int(cpus))
    if config.device == "auto" and gpus == 0:
        changes["device"] = "cpu"
    return config.replace(**changes) if changes else config


def submit_remote(sweep: SweepCells, cell: Any) -> Job:
    """A cell handed to a remote worker: scheduled in the store until it starts there, its bar
    kept across the attempts Ray or Slurm may run (``RetriedCellProgress``)."""
    job = sweep.submit(cell, scheduled=True)
    job.progress = job.progress and RetriedCellProgress(job.progress)
    return job


class RetriedCellProgress:
    """A cell's progress bar across attempts. A retried (Ray) or requeued (Slurm) cell starts
    its training over, or resumes it from a checkpoint: the bar neither goes back nor counts a
    step twice; it moves again once the new attempt passes where the last one got."""

    def __init__(self, bar: Any):
        self.bar = bar
        self.started = False
        self.shown = self.done = 0  # steps on the bar; steps of the current attempt

    def start(self, epochs: int, steps_per_epoch: int) -> None:
        if not self.started:
            self.bar.start(epochs, steps_per_epoch)
            self.started = True
        self.done = 0

    def advance(self, steps: int) -> None:
        if not self.started:  # the start event was lost (a killed node's queue): no bar to move yet
            return
        self.done += steps
        if self.done > self.shown:
            self.bar.advance(self.done - self.shown)
            self.shown = self.done

    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None:
        if self.started:
            self.bar.epoch_done(epoch, metrics)


class ServerCellWriter(MlflowTracker):
    """A remote worker's tracker: writes straight into the child run the sweep created.

    Made to run again. Ray re-runs a cell whose worker died, and Slurm requeues a preempted job,
    into the same run (never a new one, so a cell has one child run however often it starts).
    An attempt logs only the params the run does not hold yet (another node may resolve another
    device; MLflow refuses to change a param) and only the metric steps it does not hold yet, so
    no row is ever written twice. Which attempt wrote a step is not recorded: an attempt resumes
    from the previous one's checkpoint when it can reach it, and otherwise trains the same config
    from the start again, which on CPU with fixed ``--threads`` recomputes the very same values.
    """

    run_id: str  # the child run the sweep created, given at construction

    def __init__(self, uri: str, experiment: str, run_id: str):
        super().__init__(uri, experiment, run_id=run_id)
        run = self.client.get_run(run_id)
        # Ended for good by an attempt whose worker died just after (a fused job's other cells
        # trained on): FINISHED, or diverged (a result, as a relaunch counts it, not a fault).
        diverged = run.info.status == FAILED and run.data.tags.get(DIVERGED_TAG) == "true"
        self.finished = run.info.status == FINISHED or diverged
        reason = run.data.tags.get(FAILURE_REASON_TAG, "")
        self.outcome = (FAILED, f"Diverged: {reason}") if diverged else (FINISHED, "")
        self.held_params = set(run.data.params)
        self.attempt = int(run.data.tags.get(ATTEMPTS_TAG, "0")) + 1
        self.logged = {key: {m.step for m in self.client.get_metric_history(run_id, key)} for key in run.data.metrics}

    def begin_attempt(self) -> None:
        """Say which attempt runs where, and show the cell RUNNING (it was SCHEDULED)."""
        log_tags(
            self.client, self.run_id, {ATTEMPTS_TAG: self.attempt, WORKER_TAG: f"{socket.gethostname()}:{os.getpid()}"}
        )
        self.client.update_run(self.run_id, status=RUNNING)

    def start_run(self, name, params, tags):
        log_params(self.client, self.run_id, {k: v for k, v in params.items() if k not in self.held_params})
        log_tags(self.client, self.run_id, tags)
        self.log_requirements()  # the worker's own environment, on its own machine
        return self.run_id

    def resume_run(self, run_id):
        super().resume_run(run_id)
        # Again: an attempt killed outright (a lost Ray worker) may have died with them unwritten.
        self.log_requirements()


def wait_for_server(uri: str, wait_s: float = STORE_WAIT_S) -> None:
    """Wait, ``wait_s`` at most, until the tracking server ``uri`` answers its health check. A cell
    that started while the server restarted failed at once ("cannot be reached"), and Ray then
    started the next queued cell, which failed too: 118 such failed attempts in one launch of 128 cells
    (the cluster chaos soak, issue 48). A server that stays down is the writer's to report."""
    if not uri.startswith(("http://", "https://")):
        return
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=10):
                return
        except urllib.error.HTTPError as error:
            if error.code < 500:  # it answers (a login it wants, say): the writer says what is wrong
                return
        except (OSError, ValueError):  # refused, reset, timed out
            pass
        if time.monotonic() >= deadline:
            return
        time.sleep(2.0)


def open_attempt(task: CellTask, wait_s: float = STORE_WAIT_S) -> ServerCellWriter:
    """The cell's writer, its attempt begun unless an earlier one finished the run. The server may
    go down between its health check and these first requests (a restart; or PostgreSQL down
    behind an MLflow whose ``/health`` still answers): "cannot be reached" then means wait and ask
    again, ``wait_s`` in all, as at the start. Anything else (a refused login) fails at once."""
    deadline = time.monotonic() + wait_s
    while True:
        wait_for_server(task.uri, max(0.0, deadline - time.monotonic()))
        try:
            writer = ServerCellWriter(task.uri, task.experiment, task.run_id)
            if not writer.finished:
                writer.begin_attempt()
            return writer
        except ConfigError as error:
            if "cannot be reached" not in str(error) or time.monotonic() >= deadline:
                raise
        time.sleep(2.0)


def resume_point(task: CellTask, writer: ServerCellWriter) -> tuple[int, int] | None:
    """Where the cell's newest checkpoint of this run stands (epoch, step), seen from this node
    (a shared --checkpoint-dir, else beside the store as seen here); ``None``: start it over (none,
    or a checkpoint of another launch)."""
    point = find_resumable(checkpoint_folder(task.config, task.config.config_hash(), writer.uri))
    return (point.epoch, point.step) if point is not None and point.run_id == task.run_id else None


def run_remote_cell(task: CellTask, progress: Any = None) -> tuple[str, str]:
    """Run one cell; returns (status, error). The run's status is in the store either way: a
    cell that raises is FAILED there, with its reason, as with the local executor."""
    quiet_run_links()
    writer = open_attempt(task)
    if writer.finished:  # an earlier attempt ended it, and its worker died before it could say so
        return writer.outcome
    resume = resume_point(task, writer) is not None
    return run_cell(task.config, tracker=writer, progress=progress, resume=resume)


@dataclass
class _Member:
    """A cell of a fused job in this attempt: its task, writer, progress and checkpoint position."""

    index: int
    task: CellTask
    writer: ServerCellWriter
    progress: Any
    position: tuple[int, int] | None


def run_remote_job(tasks: list[CellTask], progresses: list[Any] | None = None) -> list[tuple[str, str]]:
    """Run a job, one cell or a lockstep sigma group trained as one fused model
    (``lockstep_job``), each cell into its own child run with its own progress; returns each
    cell's (status, error). Run again after a lost worker, it leaves the cells an earlier attempt
    ended as they are and resumes the others from their checkpoints: those whose checkpoints stand
    at one point train fused again (``plan_lockstep``, by position), any others after them."""
    progresses = progresses or [None] * len(tasks)
    if len(tasks) == 1:
        return [run_remote_cell(tasks[0], progresses[0])]
    quiet_run_links()
    outcomes: list[tuple[str, str] | None] = [None] * len(tasks)
    members = []
    for index, (task, progress) in enumerate(zip(tasks, progresses, strict=True)):
        writer = open_attempt(task)
        if writer.finished:
            outcomes[index] = writer.outcome
        else:
            members.append(_Member(index, task, writer, progress, resume_point(task, writer)))
    try:
        plan = plan_lockstep(
            members, get_registry(), "on", max(len(members), 2), lambda m: m.task.config, lambda m: m.position
        )
    except Exception as error:  # e.g. a component this worker lacks: its cells fail, as a lone cell's plan would
        return [outcome or (FAILED, f"{type(error).__name__}: {error}") for outcome in outcomes]
    for job in plan.jobs:
        for member, outcome in zip(job, _run_members(job), strict=True):
            outcomes[member.index] = outcome
    return [outcome or (FAILED, "never ran") for outcome in outcomes]


def _run_members(job: list[_Member]) -> list[tuple[str, str]]:
    if len(job) == 1:
        member = job[0]
        resume = member.position is not None
        return [run_cell(member.task.config, tracker=member.writer, progress=member.progress, resume=resume)]
    from initmem_plugins.executors.lockstep_job import run_lockstep  # lazy: imports torch

    return run_lockstep(
        [member.task.config for member in job],
        [member.writer for member in job],
        [member.progress for member in job],
        resume=[member.position is not None for member in job],
    )
