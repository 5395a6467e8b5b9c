"""``fan-in``: kernels ``sigma * Z`` with ``Z ~ N(0, 1 / fan_in)``.

With this convention He init is sigma = sqrt(2) ~ 1.41 and PyTorch's default conv init has the
std of sigma = 1/sqrt(3) ~ 0.58.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from initmem_core.kernels import fan_in, kernel_layers, kernel_parameters

#: Layers whose affine parameters go back to weight 1, bias 0 (running stats reset too).
NORM_LAYERS = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm, nn.RMSNorm)


@torch.no_grad()
def fan_in_init(*, model: nn.Module, sigma: float, generator: torch.Generator | None) -> None:
    """Re-initialize ``model`` in place; only ``sigma`` differs between runs with the same seed.

    Z is drawn on the CPU from ``generator`` (a CPU generator), one kernel after another in
    ``named_modules()`` order, so it does not depend on sigma, the device or the dtype.
    """
    for _, weight in kernel_parameters(model):
        unit = torch.randn(weight.shape, generator=generator, dtype=torch.float32)
        unit.mul_(1.0 / math.sqrt(fan_in(weight)))
        weight.copy_(unit.mul_(sigma))  # copy_ casts to the parameter's device and dtype
    for _, layer in kernel_layers(model):
        if layer.bias is not None:
            layer.bias.zero_()
    for module in model.modules():
        if isinstance(module, NORM_LAYERS) and hasattr(module, "reset_parameters"):
            module.reset_parameters()
