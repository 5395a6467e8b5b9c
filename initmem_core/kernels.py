"""The parameters sigma scales: the weights of every Conv1d/2d/3d and Linear layer.

Initializers and the weight-norm metrics share this one definition, so "the kernels" means the
same thing when they are set and when they are measured. Parameters outside these layers
(biases, norm affines, raw parameters such as position embeddings) are not kernels.
"""

from __future__ import annotations

import math

from torch import nn

KERNEL_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)

__all__ = ["KERNEL_LAYERS", "fan_in", "kernel_layers", "kernel_parameters"]


def kernel_layers(model: nn.Module) -> list[tuple[str, nn.Conv1d | nn.Conv2d | nn.Conv3d | nn.Linear]]:
    """Conv/Linear layers with a weight, in ``named_modules()`` order (fixes the draw order)."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, KERNEL_LAYERS) and isinstance(getattr(module, "weight", None), nn.Parameter)
    ]


def kernel_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``(parameter name, weight)`` of every kernel, each shared weight listed once."""
    seen: set[int] = set()
    kernels = []
    for name, module in kernel_layers(model):
        weight = module.weight
        assert isinstance(weight, nn.Parameter)  # kernel_layers keeps only layers whose weight is one
        if id(weight) not in seen:
            seen.add(id(weight))
            kernels.append((f"{name}.weight" if name else "weight", weight))
    return kernels


def fan_in(weight: nn.Parameter) -> int:
    """Inputs per output unit: ``in_channels / groups * kernel elements`` (Linear: ``in_features``)."""
    return math.prod(weight.shape[1:])
