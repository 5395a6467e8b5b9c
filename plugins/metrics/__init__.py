"""Built-in metrics: the paper's weight-space memory measures and its summary figures.

These three are registered with ``default=True``: every run computes them; ``--metric`` adds others.
"""

from initmem_core import hookimpl


@hookimpl
def initmem_register_metrics(register):
    register(
        "weight-norms",
        "initmem_plugins.metrics.weight_norms:WeightNorms",
        "||W||_F, ||W||/||W0||, ||W-W0||/||W0||, cos(W, W0) of the conv/linear kernels; per layer as a table",
        default=True,
    )
    register(
        "interpolation",
        "initmem_plugins.metrics.selection:Interpolation",
        "tau_interp (first epoch with train accuracy >= threshold) and the repair gap after it",
        default=True,
    )
    register(
        "best-val-selection",
        "initmem_plugins.metrics.selection:BestValidationSelection",
        "Test accuracy at the best-validation-loss epoch (the selected predictor), and final test accuracy",
        default=True,
    )
