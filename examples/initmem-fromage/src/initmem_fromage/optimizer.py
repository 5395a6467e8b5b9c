"""Fromage: Frobenius matched gradient descent.

Bernstein, Vahdat, Yue and Liu, "On the distance between two neural networks and the stability
of learning", NeurIPS 2020 (arXiv:2002.03432). For each parameter tensor ``W`` with gradient
``g``::

    W <- (W - lr * ||W|| / ||g|| * g) / sqrt(1 + lr^2)

(Frobenius norms), and ``W <- (W - lr * g) / sqrt(1 + lr^2)`` when ``||W||`` or ``||g||`` is 0.
The step has relative size ``lr`` (``||dW|| = lr * ||W||``), and the division by
``sqrt(1 + lr^2)`` undoes the norm growth the orthogonal part of the step would cause, so the
update is *scale-aware*: a layer initialized at scale sigma moves by a fixed fraction of sigma.
That is why it is interesting for initialization-memory experiments.

``p_bound`` (optional, as in the reference implementation) caps each tensor's norm at
``p_bound`` times its norm at the first step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch


class Fromage(torch.optim.Optimizer):
    """Fromage optimizer.

    Args:
        params: parameters or parameter groups.
        lr: relative step size (0.01 is the authors' suggested start).
        p_bound: if set, every tensor's norm is kept below ``p_bound`` times its initial norm.
    """

    def __init__(self, params: Iterable, lr: float = 0.01, p_bound: float | None = None):
        if not lr >= 0:
            raise ValueError(f"invalid learning rate: {lr}")
        if p_bound is not None and not p_bound > 0:
            raise ValueError(f"invalid p_bound: {p_bound}")
        super().__init__(params, dict(lr=lr, p_bound=p_bound))

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, p_bound = group["lr"], group["p_bound"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Fromage does not support sparse gradients")
                grad = p.grad
                p_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(grad)
                state = self.state[p]
                if p_bound is not None and "max_norm" not in state:
                    state["max_norm"] = p_bound * p_norm
                # ||W|| / ||g|| where both are non-zero, else 1 (plain gradient step); no host sync.
                ok = (p_norm > 0) & (g_norm > 0)
                scale = torch.where(
                    ok, p_norm / torch.where(ok, g_norm, torch.ones_like(g_norm)), torch.ones_like(p_norm)
                )
                p.sub_(grad * (lr * scale))
                p.div_(math.sqrt(1.0 + lr * lr))
                if p_bound is not None:
                    new_norm = torch.linalg.vector_norm(p)
                    max_norm = state["max_norm"]
                    shrink = torch.where(new_norm > max_norm, max_norm / new_norm, torch.ones_like(new_norm))
                    p.mul_(shrink)
        return loss
