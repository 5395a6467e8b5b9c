"""Built-in initializers: where sigma_w enters a run.

Both are *paired*: at a fixed seed the unit-scale draw Z is the same at every sigma and the
kernels become exactly ``sigma * Z``, so a sweep over sigma changes nothing else. The paper
leaves the sigma convention open; these are its two candidates. Factories are import strings,
so registering imports no torch.
"""

from __future__ import annotations

from initmem_core import hookimpl


@hookimpl
def initmem_register_initializers(register):
    register(
        "fan-in",
        "initmem_plugins.initializers.fan_in:fan_in_init",
        "Conv/Linear kernels ~ N(0, sigma^2 / fan_in), biases 0, norm layers reset (He init is sigma = sqrt 2)",
    )
    register(
        "scaled-default",
        "initmem_plugins.initializers.scaled_default:scaled_default_init",
        "sigma x the architecture's own default init of Conv/Linear kernels (PyTorch default is sigma ~ 0.58 fan-in)",
    )
