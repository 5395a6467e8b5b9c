"""``run_sweep``: every cell of a grid as a child run of one parent run, then the report on the parent.

>>> from initmem_core.sweep.launch import run_sweep
>>> result = run_sweep({"sigma": "0.1:2.5:7", "opt": ["sgd", "adam"], "epochs": 30}, workers=2)
>>> result.report.groups[0].spread

Idempotent: the parent run is found again by the sweep's name (tag ``initmem.sweep``), and a
cell whose config hash already has a FINISHED child is skipped, so a stopped sweep is resumed
by launching it again. A failing cell never stops the sweep: its child ends FAILED with a
``failure_reason`` tag and the result lists it.

Where the cells run is the executor's business (``initmem_core.sweep.executor``, a plugin kind: this
machine, a Ray cluster, Slurm); all of the above is this module's, and the same whichever runs them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.groups import short_labels
from initmem_core.plugin_system.loader import get_registry
from initmem_core.plugin_system.registry import Registry
from initmem_core.report.assessment import build_assessed_report, verdict_tags
from initmem_core.report.description import description
from initmem_core.report.figures import warm_up
from initmem_core.report.files import write_report_files
from initmem_core.report.memory import Report
from initmem_core.sweep.executor import CellOutcome, Executor, Job, check_store, make_executor
from initmem_core.sweep.grid import SweepPlan, SweepSpec, plan_sweep
from initmem_core.sweep.identity import GridIdentity
from initmem_core.tracking.cells import LEASES_FOLDER, CellLeases, ChildRunWriter, table_tags
from initmem_core.tracking.paths import check_writable_folder
from initmem_core.tracking.sweep_runs import StoredRun, SweepRuns
from initmem_core.tracking.system_metrics import require_psutil
from initmem_core.tracking.uris import DEFAULT_EXPERIMENT, resolve_tracking_uri, store_folder
from initmem_core.training.plan import RunPlan, config_params
from initmem_core.training.resume import find_resumable
from initmem_core.vocabulary import (
    CELLS_FAILED_TAG,
    CELLS_TAG,
    CELLS_UNSYNCED_TAG,
    CONFIG_HASH_TAG,
    DIVERGED_TAG,
    ENDED,
    FAILED,
    FAILURE_REASON_TAG,
    FINISHED,
    GRID_TAG,
    GROUP_LABEL_TAG,
    GROUP_TAG,
    KILLED,
    NOTE_TAG,
    PARENT_TAG,
    PENDING,
    RUNNING,
    SCHEDULED,
    SWEEP_TAG,
    VARYING_TAG,
)


class SweepProgress(Protocol):
    """Receives a sweep's progress; the CLI draws it with rich."""

    def sweep_started(self, name: str, total: int, skipped: int) -> None: ...
    def cell_started(self, run_id: str, label: str) -> Any: ...  # a training Progress, or None
    def cell_finished(self, run_id: str, status: str, error: str) -> None: ...


class NoSweepProgress:  # cell_started: no training Progress (None)
    def sweep_started(self, name, total, skipped): ...
    def cell_started(self, run_id, label): ...
    def cell_finished(self, run_id, status, error): ...


@dataclass
class SweepResult:
    name: str
    parent_run_id: str
    cells: list[CellOutcome]
    report: Report
    files: list[Path] = field(default_factory=list)  # the report's table and plots in the output folder
    experiment_id: str = ""
    view_key: str = ""  # the sweep's prepared view in the MLflow UI (``tracking.ui_view``)

    @property
    def failed(self) -> list[CellOutcome]:
        return [cell for cell in self.cells if cell.status != FINISHED]

    @property
    def unsynced(self) -> list[CellOutcome]:
        """Cells whose writes wait for `initmem sync` (the store shows them RUNNING until then)."""
        return [cell for cell in self.cells if cell.unsynced]


class _Sweep:
    """One launch of a sweep: the parent run and its children. Implements the ``SweepCells``
    an executor works with (``sweep.executor``)."""

    def __init__(
        self,
        name: str,
        uri: str,
        experiment: str,
        progress: SweepProgress,
        registry: Registry,
        identity: GridIdentity,
        extend: bool = False,
    ):
        self.name, self.uri, self.experiment, self.progress, self.registry = name, uri, experiment, progress, registry
        self.identity = identity
        self.runs = SweepRuns(uri, experiment, name, lambda tags, params: identity.admit(name, tags, params, extend))
        self.experiment_id, self.parent_id = self.runs.experiment_id, self.runs.parent_id
        self.names: dict[str, str] = {}  # config hash -> the cell's run name in this sweep
        self.labels: dict[str, str] = {}  # group key -> its short label in this sweep
        self.restarted: set[str] = set()  # child runs an earlier launch left with no checkpoint: run again
        self.view_key = ""

    def describe(self, plan: SweepPlan) -> None:
        """Give the parent the sweep's grid as params (a fixed field's value, a varying one's
        values, e.g. ``sigma=0.5,2``) and the cells their names. A relaunch with another grid
        adds params it lacks (MLflow never changes a logged param); the grid of every launch
        is in ``sweep.json`` and the tag ``initmem.varying``; the digest of every grid admitted
        (``sweep.identity``) in the tag ``initmem.grid``."""
        self.names = {cell.config_hash: name for cell, name in zip(plan.plans, plan.names)}
        self.labels = short_labels(plan.groups)[0]
        held = self.runs.parent_params()
        self.runs.add_parent_params({k: v for k, v in self.identity.values.items() if k not in held})
        self.runs.set_parent_tags({GRID_TAG: self.identity.tag_value(self.runs.parent_tags())})

    def earlier_runs(
        self, cells: list[CellOutcome], plans: Mapping[str, RunPlan], retry_failed: bool = False
    ) -> tuple[dict[str, StoredRun], dict[str, str]]:
        """From earlier launches: (config hash -> run) of the children whose cell is done, FINISHED
        or diverged (a divergence is a result, not a fault: ``retry_failed`` runs it again), and
        (config hash -> run id) of those left KILLED or RUNNING (a Ctrl-C, a machine that died)
        whose newest checkpoint belongs to them, so a relaunch continues them in the same run.
        ``plans``: each cell's plan at this store, by config hash (its checkpoint folder)."""
        by_hash = {cell.config_hash: cell.config for cell in cells}
        finished: dict[str, StoredRun] = {}
        resumable: dict[str, str] = {}
        restartable: dict[str, str] = {}
        for run in self.runs.children():
            key = run.tags.get(CONFIG_HASH_TAG, "")
            config = by_hash.get(key)
            if config is None:
                continue
            diverged = run.status == FAILED and run.tags.get(DIVERGED_TAG) == "true"
            if run.status == FINISHED or (diverged and not retry_failed):
                self._same_threads(run, config)
                if finished.get(key) is None or run.status == FINISHED:
                    finished[key] = run
            elif run.status in (KILLED, RUNNING, SCHEDULED):  # SCHEDULED: a remote launch that died
                point = find_resumable(plans[key].checkpoints)
                if point is not None and point.run_id == run.run_id:
                    self._same_threads(run, config)
                    resumable[key] = run.run_id
                else:  # stopped before its first checkpoint: start over, in that run, not a second one
                    restartable.setdefault(key, run.run_id)
        resumable = {**restartable, **resumable}
        self.restarted = {run_id for h, run_id in restartable.items() if resumable[h] == run_id}
        return finished, {h: r for h, r in resumable.items() if h not in finished}

    def _same_threads(self, run: StoredRun, config: RunConfig) -> None:
        """A cell computed under other CPU threads would mix two sets of numbers in one sweep."""
        held = run.params.get("threads")
        if held is not None and held != str(config.threads):
            raise ConfigError(
                f"sweep {self.name}: cell {run.name} was computed with --threads {held} in an earlier "
                f"launch, this one would use {config.threads}; a cell's numbers depend on its threads, so relaunch "
                f"with --threads {held} (or give the sweep another --name)"
            )

    def submit(self, cell: CellOutcome, scheduled: bool = False) -> Job:
        config = cell.config
        restart = cell.run_id in self.restarted  # its earlier launch died before a checkpoint
        params = config_params(config, cell.config_hash)  # the config as pinned for this executor
        if restart:
            cell.resume = False
        elif not cell.resume:  # a resumed cell reopens its run when it restores its checkpoint
            cell.run_id = self.runs.create_child(
                self.run_name(cell),
                {
                    PARENT_TAG: self.parent_id,
                    SWEEP_TAG: self.name,
                    GROUP_TAG: cell.group,
                    GROUP_LABEL_TAG: self.labels.get(cell.group, cell.group),
                    CONFIG_HASH_TAG: cell.config_hash,
                    **table_tags(params),  # the values its row in the runs table shows
                },
            )
        if scheduled:
            self.runs.schedule(cell.run_id)
        writer = ChildRunWriter(self.uri, self.experiment, cell.run_id)
        if restart:
            writer.resume_run(cell.run_id)  # RUNNING again; steps it holds are not written twice
        if not cell.resume:
            writer.start_run(self.run_name(cell), params, {})
        return Job(cell, writer, self.progress.cell_started(cell.run_id, cell.label))

    def run_name(self, cell: CellOutcome) -> str:
        return self.names.get(cell.config_hash) or cell.config.run_name()

    def close(self, job: Job, error: str = "") -> None:
        if error:
            job.writer.fail(error)
        job.cell.status, job.cell.error = job.writer.ended_status(), error
        job.cell.unsynced = job.writer.unsynced
        self.progress.cell_finished(job.cell.run_id, job.cell.status, error)

    @staticmethod
    def interrupt(jobs: Iterable[Job]) -> None:
        for job in jobs:
            job.writer.fail("interrupted", KILLED)

    def publish(self, out: Path, cells: list[CellOutcome], spec: SweepSpec) -> tuple[Report, list[Path]]:
        """Build the report from the store (this launch's cells and earlier ones alike) and write
        it onto the parent run and into ``out``."""
        records = self.runs.cell_records()
        report = build_assessed_report(records)
        self.runs.label_children({g.group: g.label for g in report.groups})  # an --extend may rename groups
        title = f"Initialization memory: sweep {self.name}"
        files = write_report_files(report, out, title=title, registry=self.registry, records=records)
        grid = {"axes": {name: list(values) for name, values in spec.axes.items()}, "groups": list(spec.groups)}
        self.runs.log_report(files, grid)
        log_report_metrics(self.runs, report)
        self.view_key = self.runs.write_view()
        note = description(report, self.name, self.experiment_id, self.parent_id, self.view_key, self.registry)
        self.runs.set_parent_tags(
            {
                CELLS_TAG: str(len(cells)),
                CELLS_FAILED_TAG: str(sum(cell.status != FINISHED for cell in cells)),
                CELLS_UNSYNCED_TAG: str(sum(bool(cell.unsynced) for cell in cells)),
                VARYING_TAG: ",".join(spec.varying),
                NOTE_TAG: note,
                **verdict_tags(report.findings),
            }
        )
        return report, files

    def launch(
        self,
        plan: SweepPlan,
        placed: Mapping[str, RunPlan],
        executor: Executor,
        retry_failed: bool,
        system_metrics: bool,
    ) -> SweepResult:
        self.describe(plan)
        # Each cell as this executor pins it (its threads: not hashed), under its plan's hash.
        cells = [
            CellOutcome(executor.pin(config), key, PENDING, "", config_hash=cell.config_hash)
            for config, key, cell in zip(plan.cells, plan.groups, plan.plans)
        ]
        # Leases first: a cell another live sweep process owns is neither run, resumed nor restarted.
        leases = CellLeases(store_folder(self.uri) / LEASES_FOLDER) if not executor.remote else None
        owned_elsewhere = {
            cell.config_hash for cell in cells if leases is not None and not leases.take(cell.config_hash)
        }
        try:
            finished, resumable = self.earlier_runs(cells, placed, retry_failed)
        except ConfigError:  # this launch runs nothing: the parent goes back to how it was
            before = self.runs.status_before
            self.runs.end(before if before in ENDED else FAILED)
            if leases is not None:
                leases.release()
            raise
        for cell in cells:
            earlier, interrupted = finished.get(cell.config_hash), resumable.get(cell.config_hash)
            cell.run_id = interrupted or ""
            if cell.config_hash in owned_elsewhere and earlier is None:
                cell.status, cell.skipped = RUNNING, True
                cell.error = "running in another live sweep process; relaunch once it has ended"
            elif earlier is not None:
                cell.status, cell.run_id, cell.skipped = earlier.status, earlier.run_id, True
                cell.error = earlier.tags.get(FAILURE_REASON_TAG, "")
            else:
                cell.resume = bool(interrupted)
        pending = [cell for cell in cells if not cell.skipped]
        self.progress.sweep_started(plan.name, len(pending), len(cells) - len(pending))
        status = FAILED
        monitor = self.runs.monitor_system() if system_metrics else None
        try:
            if pending:
                # The process waits for its cells: meanwhile, get the report's drawing ready (its
                # figures' library and fonts, ~0.5 s: docs/PERFORMANCE.md), off the report's path.
                drawing = threading.Thread(
                    target=warm_up, args=(self.registry,), name="initmem-report-warm-up", daemon=True
                )
                drawing.start()
                executor.run(pending, self)
                drawing.join()  # matplotlib is not thread-safe: one thread draws at a time
            else:
                executor.stop()
            report, files = self.publish(plan.out, cells, plan.spec)
            if all(cell.status == FINISHED for cell in cells):
                status = FINISHED
        except KeyboardInterrupt:
            status = KILLED
            raise
        finally:
            if monitor is not None:
                monitor.finish()
            self.runs.end(status)
            if leases is not None:
                leases.release()
        return SweepResult(plan.name, self.parent_id, cells, report, files, self.experiment_id, self.view_key)


def _rounded(value: float) -> float:
    return float(f"{value:.4g}")


def log_report_metrics(runs: SweepRuns, report: Report) -> None:
    """The report's figures onto the parent run, rounded as the report prints them (the UI shows a
    metric at full float precision); a relaunch's report (a cell run again, more cells) is then
    the parent's latest value at each step (``SweepRuns.log_figures``)."""
    runs.log_figures(
        {key: _rounded(value) for key, value in report.parent_metrics().items()},
        # memory over training, step = epoch: MLflow's charts draw each group's curve
        [(key, _rounded(value), epoch) for key, value, epoch in report.parent_step_metrics()],
    )


def run_sweep(
    spec: SweepPlan | SweepSpec | Mapping[str, Any] | str | Path,
    *,
    name: str | None = None,
    workers: int = 1,
    executor: str | Executor = "local",
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    progress: SweepProgress | None = None,
    out: str | Path | None = None,
    registry: Registry | None = None,
    retry_failed: bool = False,
    system_metrics: bool = False,
    extend: bool = False,
) -> SweepResult:
    """Run every cell of ``spec`` not finished before, then write the report onto the parent run
    and into ``out`` (default ``initmem-output/<name>``).

    ``spec``: a ``SweepPlan``, or what ``plan_sweep`` takes; every cell is validated before anything
    is tracked. With ``workers > 1`` cells run in spawned processes: plugins then come from the
    installed entry points, and a calling script needs the usual ``if __name__ == "__main__":``
    guard. ``executor``: a registered executor's name (``"local"``, ``"ray"``, ``"slurm"``...), or
    one built with its options (``make_executor``); Ray and Slurm workers write to the store
    themselves, so it must be a server.

    A cell that diverged in an earlier launch is final, like a finished one, unless
    ``retry_failed`` (cells that failed otherwise run again on every launch). ``system_metrics``:
    MLflow's system metrics of this machine on the parent run. A sweep's name is bound to its
    grid (``sweep.identity``): a relaunch with other cells is refused unless ``extend``.
    """
    registry = registry or get_registry()
    plan = spec if isinstance(spec, SweepPlan) else plan_sweep(spec, name=name, out=out, registry=registry)
    if isinstance(executor, str):
        options: dict[str, Any] = {"workers": workers} if workers != 1 else {}
        executor = make_executor(executor, folder=plan.out / executor, registry=registry, **options)
    elif workers != 1:
        raise ConfigError(
            f"--workers is for --executor local; {executor.name} runs as many cells at once as its resources allow"
        )
    uri = resolve_tracking_uri(tracking_uri)
    if system_metrics:
        require_psutil()
    check_store(executor, uri)
    placed = {cell.config_hash: cell.at(uri) for cell in plan.plans}  # each cell's checkpoint folder
    # Every folder the sweep writes to, checked before its first cell: a bad one fails in one
    # line, not once every cell has trained. Remote cells write their checkpoints on their own machines.
    check_writable_folder(plan.out, "--out")
    if not executor.remote:
        for root in {cell.checkpoints.parent for cell in placed.values() if cell.checkpoints is not None}:
            check_writable_folder(root, "--checkpoint-dir")
    progress = progress or NoSweepProgress()
    executor.start()  # workers import torch while the store opens
    try:
        sweep = _Sweep(plan.name, uri, experiment, progress, registry, GridIdentity.of(plan.cells), extend)
        return sweep.launch(plan, placed, executor, retry_failed, system_metrics)
    finally:
        executor.stop()  # workers no cell needed (every cell was done)
