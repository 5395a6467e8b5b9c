"""What every report figure shares: its canvas, how it is saved, and the warm-up a sweep calls while
its cells train (``FigureInfo.warm_up``).

Figures are built with the object API (``Figure`` + ``FigureCanvasAgg``), never ``pyplot``: no
global backend is switched and nothing opens a window, in a terminal, a notebook or a worker.
"""

from __future__ import annotations

from pathlib import Path

from initmem_core.vocabulary import CLOCK_FORMULAS, CLOCK_L2, CLOCK_SGD


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


def warm_up() -> None:
    """Import matplotlib and draw a throw-away figure with the report's symbols, so that fonts and
    text layout are loaded before the report is due (a sweep calls this while its cells run)."""
    figure = new_figure(2.0, 2.0)
    ax = figure.add_subplot()
    ax.errorbar([0.0, 1.0], [0.0, 1.0], yerr=[[0.1, 0.1], [0.1, 0.1]], marker="o", label="σ_w")
    ax.set(xlabel=CLOCK_FORMULAS[CLOCK_SGD], title=CLOCK_FORMULAS[CLOCK_L2])
    figure.legend(loc="outside lower center", fontsize="small")
    figure.canvas.draw()
