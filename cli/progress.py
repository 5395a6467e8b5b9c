"""Rich progress for one training run: a bar over all steps, the latest epoch's figures beside it,
and one line per epoch (``--progress lines``, or by default when the output is a terminal)."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from initmem_core.vocabulary import CLOCK_SYMBOLS, TEST_ACC, TRAIN_ACC, TRAIN_LOSS, VAL_ACC

#: ``--progress``: auto (a bar, and a line per epoch on a terminal), lines (a line per epoch
#: wherever the output goes, the bar too on a terminal), bar (the bar only).
PROGRESS_MODES = ("auto", "lines", "bar")


def _percent(metrics: dict[str, float], key: str) -> str:
    value = metrics.get(key)
    return "–" if value is None else f"{100 * value:.1f}%"


def epoch_line(epoch: int, epochs: int, metrics: dict[str, float], seconds: float | None = None) -> str:
    """``epoch 3/10  loss 0.412  train 88.1%  val 85.0%  test 84.2%  T_SGD 0.0123  T_L2 0  T_adapt 1.5  (4.2 s)``."""
    loss = metrics.get(TRAIN_LOSS)
    parts = [
        f"epoch {epoch}/{epochs}",
        f"loss {'–' if loss is None else f'{loss:.4g}'}",
        f"train {_percent(metrics, TRAIN_ACC)}",
        f"val {_percent(metrics, VAL_ACC)}",
        f"test {_percent(metrics, TEST_ACC)}",
        *(f"{symbol} {metrics[clock]:.4g}" for clock, symbol in CLOCK_SYMBOLS.items() if clock in metrics),
    ]
    return "  ".join(parts) + ("" if seconds is None else f"  ({seconds:.1f} s)")


class RunProgress:
    """Implements ``initmem_core.training.loop.Progress`` on top of ``rich.progress.Progress``."""

    def __init__(self, console: Console | None = None, label: str = "train", mode: str = "auto"):
        self.label = label
        console = console or Console(stderr=True)
        #: a line per epoch: asked for, or by default where someone watches (a terminal)
        self.lines = mode == "lines" or (mode == "auto" and console.is_terminal)
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[figures]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.task: TaskID | None = None
        self.epochs = 0
        self._since = time.monotonic()

    def __enter__(self) -> RunProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def start(self, epochs: int, steps_per_epoch: int) -> None:
        self.epochs = epochs
        self.bar.console.print(f"[bold]{self.label}[/bold]")
        self.task = self.bar.add_task(f"epoch 0/{epochs}", total=epochs * steps_per_epoch, figures="")
        self._since = time.monotonic()

    def advance(self, steps: int) -> None:
        assert self.task is not None  # start() comes first
        self.bar.advance(self.task, steps)

    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None:
        if self.lines:
            now = time.monotonic()
            # above the bar on a terminal; one plain line each in a log
            self.bar.console.print(
                epoch_line(epoch, self.epochs, metrics, now - self._since if epoch else None),
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
            self._since = now
        loss, train, val = (metrics.get(k, float("nan")) for k in (TRAIN_LOSS, TRAIN_ACC, VAL_ACC))
        figures = f"loss {loss:.3f} acc {train:.3f} val {val:.3f}"
        assert self.task is not None
        self.bar.update(self.task, description=f"epoch {epoch}/{self.epochs}", figures=figures)
