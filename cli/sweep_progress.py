"""Rich progress for a sweep: one line for the whole grid (done, failed, remaining, ETA) and one
bar per running cell with its latest epoch's figures."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from initmem_core.vocabulary import FINISHED, TRAIN_ACC, VAL_ACC


def eta_text(elapsed_s: float, finished: int, remaining: int) -> str:
    """Remaining cells at the pace so far (parallel workers included in that pace)."""
    if not finished or not remaining:
        return ""
    seconds = int(elapsed_s / finished * remaining)
    return f"ETA {seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class CellBar:
    """The training ``Progress`` protocol for one cell, drawn as a task of the sweep's display."""

    def __init__(self, bar: Progress, label: str):
        self.bar, self.label = bar, label
        self.task: TaskID | None = None
        self.epochs = 0

    def start(self, epochs: int, steps_per_epoch: int) -> None:
        self.epochs = epochs
        self.task = self.bar.add_task(f"  {self.label} epoch 0/{epochs}", total=epochs * steps_per_epoch, figures="")

    def advance(self, steps: int) -> None:
        assert self.task is not None  # start() comes first
        self.bar.advance(self.task, steps)

    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None:
        assert self.task is not None
        self.bar.update(
            self.task,
            description=f"  {self.label} epoch {epoch}/{self.epochs}",
            figures=f"acc {metrics[TRAIN_ACC]:.3f} val {metrics[VAL_ACC]:.3f}",
        )

    def remove(self) -> None:
        if self.task is not None:
            self.bar.remove_task(self.task)


class SweepDisplay:
    """Implements ``initmem_core.sweep.launch.SweepProgress`` with ``rich.progress``."""

    def __init__(self, console: Console | None = None):
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[figures]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.console = self.bar.console
        self.cells: dict[str, CellBar] = {}
        self.overall: TaskID | None = None
        self.total = self.done = self.failed = 0
        self.started_at = time.monotonic()

    def __enter__(self) -> SweepDisplay:
        self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def sweep_started(self, name: str, total: int, skipped: int) -> None:
        self.total, self.started_at = total, time.monotonic()
        if skipped:
            self.console.print(f"{skipped} cells finished in an earlier launch: skipped")
        self.overall = self.bar.add_task("", total=total, figures="")
        self._update()

    def _update(self) -> None:
        finished = self.done + self.failed
        remaining = self.total - finished
        eta = eta_text(time.monotonic() - self.started_at, finished, remaining)
        assert self.overall is not None  # sweep_started() comes first
        self.bar.update(
            self.overall,
            completed=finished,
            figures=eta,
            description=f"[bold]cells[/bold] done {self.done} · failed {self.failed} · remaining {remaining}",
        )

    def cell_started(self, run_id: str, label: str) -> CellBar:
        self.cells[run_id] = CellBar(self.bar, label)
        return self.cells[run_id]

    def cell_finished(self, run_id: str, status: str, error: str) -> None:
        cell = self.cells.pop(run_id)
        cell.remove()
        if status == FINISHED:
            self.done += 1
        else:
            self.failed += 1
            self.console.print(f"[red]{status}[/red] {cell.label}: {error}")
        self._update()
