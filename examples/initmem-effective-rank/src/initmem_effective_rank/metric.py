"""Effective rank: how many directions a layer's weights really use, and how that moved from W0.

For the singular values ``s`` of a matrix, with ``p = s / sum(s)``, the effective rank is
``exp(H(p))``, ``H`` the Shannon entropy (Roy and Vetterli, 2007): 1 for a rank-one matrix,
``min(rows, cols)`` when every singular value is equal, 0 (by convention) for a zero matrix.
Conv kernels are read as ``out x (in * kh * kw)`` matrices.

Why it is a memory diagnostic: the effective rank does not change with scale, so at the
initialization ``W0 = sigma * Z`` it is the same at every sigma, and high (a Gaussian draw
spreads its spectrum). Whatever differs between sigmas later was put there by training. Per
evaluation point, averaged over the Conv and Linear kernels:

- ``effective_rank``: effective rank of W over ``min(rows, cols)``, in (0, 1];
- ``effective_rank_ratio``: effective rank of W over that of W0; 1 at the initialization, lower
  as the spectrum stops looking like the random draw;
- ``update_effective_rank``: effective rank of ``W - W0`` over ``min(rows, cols)``: how many
  directions training has moved each layer in (left out at epoch 0, where nothing moved).
"""

from __future__ import annotations

import torch
from torch import nn

KERNEL_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)


def effective_rank(matrix: torch.Tensor) -> torch.Tensor:
    """Effective rank of a 2-D tensor, as a 0-d tensor on its device (no host sync)."""
    singular = torch.linalg.svdvals(matrix.detach().float())
    total = singular.sum()
    p = singular / total.clamp_min(torch.finfo(singular.dtype).tiny)
    rank = torch.exp(torch.special.entr(p).sum())  # entr(p) = -p log p, and entr(0) = 0
    return torch.where(total > 0, rank, torch.zeros_like(rank))


def kernels(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """(parameter name, kernel as a matrix) of every Conv/Linear layer, in module order."""
    return [
        (f"{name}.weight" if name else "weight", module.weight.flatten(1))
        for name, module in model.named_modules()
        if isinstance(module, KERNEL_LAYERS)
    ]


class EffectiveRank:
    def compute(self, state) -> dict[str, float]:
        layers = kernels(state.model)
        initial = [state.initial_params[name].flatten(1) for name, _ in layers]
        sizes = torch.tensor([min(w.shape) for _, w in layers], dtype=torch.float32, device=state.device)
        now = torch.stack([effective_rank(w) for _, w in layers])
        at_init = torch.stack([effective_rank(w0) for w0 in initial])
        figures = {"effective_rank": (now / sizes).mean(), "effective_rank_ratio": (now / at_init).mean()}
        if state.epoch > 0:
            update = torch.stack([effective_rank(w - w0) for (_, w), w0 in zip(layers, initial)])
            figures["update_effective_rank"] = (update / sizes).mean()
        values = torch.stack(list(figures.values())).tolist()  # the one host sync of this evaluation point
        return dict(zip(figures, values))
