"""What an executor is: it runs a sweep's cells somewhere and says how each one ended, through
the ``SweepCells`` the sweep offers it. The sweep keeps everything else, whichever executor runs
the cells: the parent run, one child run per cell, skipping cells done before, the progress
display and the report.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.registry import Registry
from initmem_core.tracking.cells import PROGRESS_CALLS
from initmem_core.vocabulary import FAILED

if TYPE_CHECKING:
    from initmem_core.tracking.cells import ChildRunWriter


@dataclass
class CellOutcome:
    config: RunConfig
    group: str
    status: str  # PENDING, then FINISHED, FAILED or KILLED
    run_id: str
    error: str = ""
    skipped: bool = False  # finished in an earlier launch
    resume: bool = False  # an earlier launch left it KILLED or RUNNING with a checkpoint: continue run_id
    unsynced: str = ""  # writes the store did not take (they wait for `initmem sync`), and where
    config_hash: str = ""  # its plan's (``RunPlan.config_hash``), set by the sweep

    @property
    def label(self) -> str:
        return f"{self.group} · σ={self.config.sigma:g} · seed {self.config.seed}"


@dataclass
class Job:
    """A cell handed to an executor: its child run's writer and its progress bar (or ``None``)."""

    cell: CellOutcome
    writer: ChildRunWriter
    progress: Any


def run_cell(config: RunConfig, **run_options: Any) -> tuple[str, str]:
    """Run one cell with ``initmem_core.run``; returns (status, error as text, empty if none).

    A failing cell never stops the sweep: its run is already FAILED in the store with its reason,
    and the error comes back as text, since an exception object may not survive pickling back
    from a worker process or node. Ctrl-C and SIGTERM (``KeyboardInterrupt``) still propagate.
    """
    from initmem_core.training.runner import run  # lazy: keeps the training code out of the CLI's start-up

    try:
        return run(config, **run_options).status, ""
    except Exception as error:
        return FAILED, f"{type(error).__name__}: {error}"


class SweepCells(Protocol):
    """What the sweep offers an executor."""

    name: str  # the sweep's
    uri: str
    experiment: str
    registry: Registry

    def submit(self, cell: CellOutcome, scheduled: bool = False) -> Job:
        """Create the cell's child run (status SCHEDULED if ``scheduled``: it waits in a queue)."""

    def close(self, job: Job, error: str = "") -> None:
        """The cell ended, or its worker is gone (``error`` says why): end its run if nobody
        did, record its status and count it on the display."""

    def interrupt(self, jobs: Iterable[Job]) -> None:
        """Ctrl-C, or the sweep process failing: end the runs of cells still out as KILLED."""


class Executor:
    """What every executor is; ``LocalExecutor``, ``RayExecutor`` and ``SlurmExecutor`` derive
    from it. Only ``run`` must be given: ``start``, ``stop`` and ``pin`` have defaults."""

    name: str
    #: Workers write to the tracking store themselves, from other machines: it must be a server.
    remote: bool

    def start(self) -> None:
        """Start workers now, before the sweep opens the store (``run_sweep`` calls it when
        there are cells to run). The default has none to start."""

    def stop(self) -> None:
        """Stop workers started but never used (the sweep failed, or had no cell left to run).
        The default has none to stop."""

    def pin(self, config: RunConfig) -> RunConfig:
        """The cell's config with the compute settings it will run under (its CPU threads), set
        before the sweep looks at earlier launches: a cell's numbers depend on them, so they must
        not depend on how many cells run beside it. The default leaves the config as it is."""
        return config

    def run(self, cells: list[CellOutcome], sweep: SweepCells) -> None:
        """Run every cell, submitting and closing each through ``sweep``."""
        raise NotImplementedError


@dataclass(frozen=True)
class CellTask:
    """All a remote worker gets: the cell's config and the child run to write it into."""

    config: RunConfig
    run_id: str
    uri: str
    experiment: str


def check_store(executor: Executor, uri: str) -> None:
    """A remote executor's workers cannot write to a SQLite file or a folder on this machine."""
    if executor.remote and urlparse(uri).scheme in ("", "file", "sqlite"):
        raise ConfigError(
            f"--executor {executor.name} runs cells on other machines, which cannot write to {uri}: "
            "start an MLflow tracking server (`mlflow server --backend-store-uri sqlite:///server.db "
            "--host 0.0.0.0 --port 5000`) and pass --tracking-uri http://<host>:5000; see docs/distributed.md"
        )


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


def replay_progress(job: Job, call: str, args: Any) -> None:
    """A progress event a worker sent (see ``tracking.cells.QueueProgress``), onto the cell's bar."""
    if job.progress is not None and call in PROGRESS_CALLS:
        getattr(job.progress, call)(*args)


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
        self.done += steps
        if self.done > self.shown:
            self.bar.advance(self.done - self.shown)
            self.shown = self.done

    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None:
        self.bar.epoch_done(epoch, metrics)
