"""The report's figures, as a plugin: accuracy, weight norms, spread, interpolation and memory over
training against sigma, the epoch and the clocks (``plots.py``), and the claims' forest plot
(``verdicts.py``), each a PNG in the report's folder and on the parent run.

Loaded like any plugin (the ``figures`` entry point), by import string: listing plugins imports no
matplotlib. ``INITMEM_LOAD_PLUGINS`` without ``figures`` leaves it out, and a report is then its
tables (and the other plugins' figures) alone.
"""

from __future__ import annotations

from initmem_core import hookimpl

#: name -> (the drawing function in this package, what it shows); each is written to ``<name>.png``.
FIGURES = {
    "test_acc_vs_sigma": ("plots:accuracy_vs_sigma", "Test accuracy of the selected predictor against sigma"),
    "weight_norm_vs_epoch": ("plots:weight_norm_curves", "||W||_F over epochs, a panel per group, by sigma"),
    "spread_vs_clocks": ("plots:spread_vs_clocks", "Debiased spread against the forgetting clocks that moved"),
    "tau_interp_vs_sigma": ("plots:tau_interp_vs_sigma", "Interpolation epoch against sigma, runs that never did"),
    "memory_vs_epoch": ("plots:memory_vs_epoch", "Every memory against the epoch, with half-lives"),
    "memory_vs_clock": ("plots:memory_vs_clock", "Every memory against every clock that moved"),
    "verdicts": ("verdicts:verdict_plot", "The claims' verdicts as a forest plot (when any was evaluated)"),
}
#: The file each figure is written to, in the order the report lists them (the forest plot last).
FILES = tuple(f"{name}.png" for name in FIGURES)


@hookimpl
def initmem_register_figures(register):
    for name, (draw, description) in FIGURES.items():
        register(name, f"{__name__}.{draw}", description, warm_up=f"{__name__}.canvas:warm_up")
