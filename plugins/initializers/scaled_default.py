"""``scaled-default``: sigma times the architecture's own default init of its kernels.

Relies on the model being freshly built: the run seeds torch's global RNG with the run seed
before building it, so the default init *is* the paired unit draw Z and this initializer only
multiplies each Conv/Linear kernel by sigma. Calling it twice, or on a trained model, scales
again. ``generator`` is unused (the draw already happened at build time). Biases and norm
layers stay as built.
"""

from __future__ import annotations

import torch
from torch import nn

from initmem_core.kernels import kernel_parameters


@torch.no_grad()
def scaled_default_init(*, model: nn.Module, sigma: float, generator: torch.Generator | None = None) -> None:
    for _, weight in kernel_parameters(model):
        weight.mul_(sigma)
