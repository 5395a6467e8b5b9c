"""``run_sweep``: every cell of a grid as a child run of one parent run, then the report on the parent.

>>> from initmem_core.sweep import run_sweep
>>> result = run_sweep({"sigma": "0.1:2.5:7", "opt": ["sgd", "adam"], "epochs": 30}, workers=2)
>>> result.report.groups[0].spread

Idempotent: the parent run is found again by the sweep's name (tag ``initmem.sweep``), and a
cell whose config hash already has a FINISHED child is skipped, so a stopped sweep is resumed
by launching it again. A failing cell never stops the sweep: its child ends FAILED with a
``failure_reason`` tag and the result lists it.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import os
import queue as queues
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol

from .config import RunConfig
from .errors import ConfigError
from .grid import SweepSpec, default_name, expand, group_keys, spec_from_toml, spec_from_values
from .plugins import get_registry
from .records import (GROUP_TAG, PARENT_TAG, ROLE_TAG, SWEEP_TAG, check_sweep_name, child_runs, find_parent,
                      latest_per_cell, record_from_run)
from .report import Report, build_report
from .report_files import write_report_files
from .tracking import DEFAULT_EXPERIMENT, ensure_experiment, open_client, resolve_tracking_uri, to_json

DEFAULT_OUTPUT = Path("initmem-output")
MLFLOW_METRIC_LIMIT = 1000  # metrics per log_batch call


class SweepProgress(Protocol):
    """Receives a sweep's progress; the CLI draws it with rich."""

    def sweep_started(self, name: str, total: int, skipped: int) -> None: ...
    def cell_started(self, run_id: str, label: str) -> Any: ...  # a training Progress, or None
    def cell_finished(self, run_id: str, status: str, error: str) -> None: ...


class NoSweepProgress:
    def sweep_started(self, name, total, skipped): pass
    def cell_started(self, run_id, label): return None
    def cell_finished(self, run_id, status, error): pass


@dataclass
class CellOutcome:
    config: RunConfig
    group: str
    status: str  # PENDING, then FINISHED, FAILED or KILLED
    run_id: str
    error: str = ""
    skipped: bool = False  # finished in an earlier launch

    @property
    def label(self) -> str:
        return f"{self.group} · σ={self.config.sigma:g} · seed {self.config.seed}"


@dataclass
class SweepResult:
    name: str
    parent_run_id: str
    cells: list[CellOutcome]
    report: Report
    files: list[Path] = field(default_factory=list)  # the report's table and plots in the output folder

    @property
    def failed(self) -> list[CellOutcome]:
        return [cell for cell in self.cells if cell.status != "FINISHED"]


def as_spec(spec: SweepSpec | Mapping[str, Any] | str | Path) -> SweepSpec:
    """A spec, a mapping of field -> values (``{"sigma": [0.5, 1], "epochs": 5}``) or a TOML path."""
    if isinstance(spec, SweepSpec):
        return spec
    if isinstance(spec, (str, Path)):
        return spec_from_toml(spec)
    return spec_from_values(spec)


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


@dataclass
class _InFlight:
    """A cell running in a worker: where its events go, which slot it holds, which pool runs it."""

    cell: CellOutcome
    writer: Any
    progress: Any
    slot: int
    pool: futures.ProcessPoolExecutor


class _Sweep:
    """One launch of a sweep: the parent run, its children, and the one writer they share."""

    def __init__(self, name: str, uri: str, experiment: str, progress: SweepProgress):
        self.name, self.uri, self.experiment, self.progress = name, uri, experiment, progress
        self.client = open_client(uri)
        self.experiment_id = ensure_experiment(self.client, uri, experiment)
        parent = find_parent(self.client, self.experiment_id, name)
        if parent is None:
            parent = self.client.create_run(self.experiment_id, run_name=name,
                                            tags={SWEEP_TAG: name, ROLE_TAG: "parent"})
        else:
            self.client.update_run(parent.info.run_id, status="RUNNING")
        self.parent = parent
        self.parent_id = parent.info.run_id

    def finished_hashes(self) -> dict[str, str]:
        """config hash -> run id of every child that finished in an earlier launch."""
        return {run.data.tags["config_hash"]: run.info.run_id for run in child_runs(self.client, self.parent)
                if run.info.status == "FINISHED" and "config_hash" in run.data.tags}

    def create_child(self, config: RunConfig, group: str):
        from .cell_tracking import ChildRunWriter, config_params

        run = self.client.create_run(self.experiment_id, run_name=config.run_name(), tags={
            PARENT_TAG: self.parent_id, SWEEP_TAG: self.name, GROUP_TAG: group,
            "config_hash": config.config_hash()})
        writer = ChildRunWriter(self.uri, self.experiment, run.info.run_id)
        writer.start_run(config.run_name(), config_params(config), {})
        return writer

    def run_in_process(self, cells: list[CellOutcome], registry: Any) -> None:
        from .runner import run

        for cell in cells:
            writer = self.create_child(cell.config, cell.group)
            cell.run_id = writer.run_id
            progress = self.progress.cell_started(cell.run_id, cell.label)
            try:
                run(cell.config, tracker=writer, progress=progress, registry=registry)
            except Exception as error:  # recorded on the child; the sweep goes on
                cell.error = f"{type(error).__name__}: {error}"
                writer.fail(cell.error)
            except KeyboardInterrupt:
                writer.fail("interrupted", "KILLED")
                raise
            self._finish(cell, writer)

    def run_in_workers(self, cells: list[CellOutcome], workers: int) -> None:
        """Cells in spawned processes; this process alone writes to the store (see cell_tracking)."""
        from multiprocessing.managers import SyncManager

        from .cell_tracking import ignore_sigint, run_cell_in_worker

        context = multiprocessing.get_context("spawn")
        gpus, cpus = _gpu_count(), os.cpu_count() or 1
        todo = list(cells)
        running: dict[futures.Future, _InFlight] = {}
        manager = SyncManager(ctx=context)
        manager.start(ignore_sigint)
        with manager, tempfile.TemporaryDirectory(prefix="initmem-sweep-") as staging:
            events = manager.Queue()
            pool = futures.ProcessPoolExecutor(workers, mp_context=context)
            try:
                while todo or running:
                    free = sorted(set(range(workers)) - {job.slot for job in running.values()})
                    while todo and free:
                        cell, slot = todo.pop(0), free.pop(0)
                        cell.config = for_slot(cell.config, slot, workers, cpus, gpus)
                        writer = self.create_child(cell.config, cell.group)
                        cell.run_id = writer.run_id
                        progress = self.progress.cell_started(cell.run_id, cell.label)
                        future = pool.submit(run_cell_in_worker, cell.config, cell.run_id, events, staging, self.uri)
                        running[future] = _InFlight(cell, writer, progress, slot, pool)
                    # A future that is done has put all its events: drain first, then close its cell.
                    done = [f for f in running if f.done()]
                    self._drain(events, {job.cell.run_id: job for job in running.values()}, wait=not done)
                    for future in done:
                        job = running.pop(future)
                        try:
                            job.cell.status, job.cell.error = future.result()
                        except futures.process.BrokenProcessPool as error:  # a worker died, e.g. out of memory
                            job.cell.error = f"worker process died: {error}"
                            if job.pool is pool:
                                pool.shutdown(wait=False)
                                pool = futures.ProcessPoolExecutor(workers, mp_context=context)
                        if job.cell.error:
                            job.writer.fail(job.cell.error)
                        self._finish(job.cell, job.writer)
            except KeyboardInterrupt:
                for job in running.values():
                    job.writer.fail("interrupted", "KILLED")
                raise
            finally:  # after Ctrl-C, do not wait for the cells still running
                pool.shutdown(wait=not running, cancel_futures=True)

    @staticmethod
    def _drain(events, jobs: dict[str, "_InFlight"], wait: bool) -> None:
        """Replay every queued event into its child's writer (or its progress bar)."""
        from .cell_tracking import PROGRESS_CALLS, TRACKER_CALLS

        try:
            event = events.get(timeout=0.2) if wait else events.get_nowait()
            while True:
                run_id, call, args = event
                job = jobs[run_id]
                if call in TRACKER_CALLS:
                    getattr(job.writer, call)(*args)
                    if call == "log_artifact":
                        Path(args[0]).unlink()
                elif call in PROGRESS_CALLS and job.progress is not None:
                    getattr(job.progress, call)(*args)
                event = events.get_nowait()
        except queues.Empty:
            return

    def _finish(self, cell: CellOutcome, writer) -> None:
        cell.status = writer.ended or "FAILED"
        self.progress.cell_finished(cell.run_id, cell.status, cell.error)

    def publish(self, out: Path, cells: list[CellOutcome], spec: SweepSpec) -> tuple[Report, list[Path]]:
        """Build the report from the store (this launch's cells and earlier ones alike) and write
        it onto the parent run and into ``out``."""
        from mlflow.entities import Metric, RunTag

        runs = latest_per_cell(child_runs(self.client, self.parent))
        report = build_report(record_from_run(self.client, run) for run in runs)
        files = write_report_files(report, out, title=f"Initialization memory: sweep {self.name}")
        for path in files:
            self.client.log_artifact(self.parent_id, str(path), "report")
        grid = {"axes": {name: list(values) for name, values in spec.axes.items()}, "groups": list(spec.groups)}
        self.client.log_text(self.parent_id, to_json(grid), "sweep.json")
        metrics = [Metric(key, value, 0, 0) for key, value in report.parent_metrics().items()]
        for start in range(0, len(metrics), MLFLOW_METRIC_LIMIT):
            self.client.log_batch(self.parent_id, metrics=metrics[start:start + MLFLOW_METRIC_LIMIT])
        failed = sum(1 for cell in cells if cell.status != "FINISHED")
        self.client.log_batch(self.parent_id, tags=[
            RunTag("initmem.cells", str(len(cells))), RunTag("initmem.cells_failed", str(failed)),
            RunTag("initmem.varying", ",".join(spec.varying))])
        return report, files


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_sweep(
    spec: SweepSpec | Mapping[str, Any] | str | Path,
    *,
    name: str | None = None,
    workers: int = 1,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    progress: SweepProgress | None = None,
    out: str | Path | None = None,
    registry: Any = None,
) -> SweepResult:
    """Run every cell of ``spec`` not finished before, then write the report onto the parent run
    and into ``out`` (default ``initmem-output/<name>``).

    Every cell is validated before anything is tracked (``ConfigError`` otherwise). With
    ``workers > 1`` cells run in that many spawned processes: plugins then come from the
    installed entry points, not from a registry set in this process, and a script that calls
    this needs the usual ``if __name__ == "__main__":`` guard of multiprocessing.
    """
    spec = as_spec(spec)
    if workers < 1:
        raise ConfigError(f"--workers must be 1 or greater, got {workers}")
    registry = registry or get_registry()
    configs = expand(spec, registry)
    name = check_sweep_name(name or spec.name or default_name(spec))
    progress = progress or NoSweepProgress()
    sweep = _Sweep(name, resolve_tracking_uri(tracking_uri), experiment, progress)
    done = sweep.finished_hashes()
    cells = []
    for config, key in zip(configs, group_keys(configs)):
        earlier = done.get(config.config_hash())
        cells.append(CellOutcome(config, key, "FINISHED" if earlier else "PENDING", earlier or "",
                                 skipped=bool(earlier)))
    pending = [cell for cell in cells if not cell.skipped]
    progress.sweep_started(name, len(pending), len(cells) - len(pending))
    status = "FAILED"
    try:
        if workers == 1:
            sweep.run_in_process(pending, registry)
        else:
            sweep.run_in_workers(pending, workers)
        report, files = sweep.publish(Path(out) if out else DEFAULT_OUTPUT / name, cells, spec)
        if all(cell.status == "FINISHED" for cell in cells):
            status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        sweep.client.set_terminated(sweep.parent_id, status)
    return SweepResult(name, sweep.parent_id, cells, report, files)

