"""What an executor is: it runs a sweep's cells somewhere and says how each one ended, through
the ``SweepCells`` the sweep offers it. The sweep keeps everything else, whichever executor runs
the cells: the parent run, one child run per cell, skipping cells done before, the progress
display and the report.

Executors are plugins (``hookspecs.initmem_register_executors``; the built-in local, ray and slurm
are ``initmem_plugins.executors``): ``make_executor`` looks one up by name and builds it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError, UnknownComponentError, did_you_mean
from initmem_core.plugin_system.loader import get_registry
from initmem_core.plugin_system.registry import Registry
from initmem_core.vocabulary import FAILED

if TYPE_CHECKING:
    from initmem_core.tracking.cells import ChildRunWriter

#: The kind executors register as (``kinds.REPORT_KINDS``).
EXECUTOR = "executor"


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
    """What every executor is (what an ``ExecutorFactory`` returns); the built-in ones
    derive from it. Only ``run`` must be given: ``start``, ``stop`` and ``pin`` have defaults."""

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


class ExecutorFactory(Protocol):
    """Returns an ``Executor`` (``run(cells, sweep)``, each cell submitted and closed through
    ``sweep``, run with ``run_cell``; ``start``, ``stop`` and ``pin`` optional), built from the
    executor options the sweep was given (``--workers``, ``--ray-address``...: those its
    ``ExecutorInfo.options`` declares) and ``folder``, its own folder in the sweep's output
    (``<out>/<name>``) for files its workers share. A bad option is a ``ConfigError`` (one line)."""

    def __call__(self, *, folder: Path, **options: Any) -> Executor: ...


def check_store(executor: Executor, uri: str) -> None:
    """A remote executor's workers cannot write to a SQLite file or a folder on this machine."""
    if executor.remote and urlparse(uri).scheme in ("", "file", "sqlite"):
        raise ConfigError(
            f"--executor {executor.name} runs cells on other machines, which cannot write to {uri}: "
            "start an MLflow tracking server (`mlflow server --backend-store-uri sqlite:///server.db "
            "--host 0.0.0.0 --port 5000`) and pass --tracking-uri http://<host>:5000; see docs/distributed.md"
        )


def make_executor(
    name: str,
    *,
    folder: str | Path | None = None,
    registry: Registry | None = None,
    flags: Mapping[str, str] | None = None,
    **options: Any,
) -> Executor:
    """``make_executor("ray", address="auto", gpus_per_cell=0.5)``: the registered executor, built
    with ``options`` (those it declares: ``contracts.ExecutorInfo``) and ``folder``, its own in the
    sweep's output. Refused in one line: a name nobody registered, an option it does not take
    (``flags``: how the user spelled each option, e.g. ``--ray-address``), a package it needs that
    is not installed."""
    registry = registry or get_registry()
    try:
        spec, variant = registry.lookup(EXECUTOR, name)
    except UnknownComponentError:
        names = registry.names(EXECUTOR)
        valid = ", ".join(names) if names else "none (the plugin 'executors' has local, ray and slurm)"
        raise ConfigError(
            f"--executor: no executor named '{name}' is registered{did_you_mean(name, names)}; valid executors: {valid}"
        ) from None
    spelled = dict(flags or {})
    for option in options:
        if option not in spec.info.options:
            takers = [s.name for s in registry.components[EXECUTOR].values() if option in s.info.options]
            takes = ", ".join(spelled.get(o, o) for o in spec.info.options) or "none"
            raise ConfigError(
                f"{spelled.get(option, option)} is for --executor {' or '.join(takers)}, not {name}"
                if takers
                else f"--executor {name} takes no option {spelled.get(option, option)}; its options: {takes}"
            )
    missing = [package for package in spec.info.needs if not _installed(package)]
    if missing:
        install = f": {spec.info.install}" if spec.info.install else ""
        raise ConfigError(f"--executor {name} needs {', '.join(missing)}, which is not installed{install}")
    if folder is not None:
        options["folder"] = Path(folder)
    return spec.build(variant, **options)


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a module without a spec
        return False
