"""Rich progress for one training run: a bar over all steps, the latest epoch's figures beside it."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class RunProgress:
    """Implements ``initmem_core.training.loop.Progress`` on top of ``rich.progress.Progress``."""

    def __init__(self, console: Console | None = None, label: str = "train"):
        self.label = label
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
        self.task = None
        self.epochs = 0

    def __enter__(self) -> RunProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def start(self, epochs: int, steps_per_epoch: int) -> None:
        self.epochs = epochs
        self.bar.console.print(f"[bold]{self.label}[/bold]")
        self.task = self.bar.add_task(f"epoch 0/{epochs}", total=epochs * steps_per_epoch, figures="")

    def advance(self, steps: int) -> None:
        self.bar.advance(self.task, steps)

    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None:
        figures = f"loss {metrics['train_loss']:.3f} acc {metrics['train_acc']:.3f} val {metrics['val_acc']:.3f}"
        self.bar.update(self.task, description=f"epoch {epoch}/{self.epochs}", figures=figures)
