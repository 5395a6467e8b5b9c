"""What every report figure shares: its canvas and how it is saved.

Figures are built with the object API (``Figure`` + ``FigureCanvasAgg``), never ``pyplot``: no
global backend is switched and nothing opens a window, in a terminal, a notebook or a worker.
"""

from __future__ import annotations

from pathlib import Path


def new_figure(width: float = 6.4, height: float = 4.2):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)  # constrained layout keeps legends and captions inside: one draw
    return path
