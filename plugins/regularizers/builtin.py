"""The built-in regularizers, applied as gradients rather than as a second autograd graph.

Each class is a factory called as ``Cls(coefficient=lambda)``. The training loop calls
``add_gradient(params, initial_params)`` after ``loss.backward()`` and before
``optimizer.step()``. Because the penalty ``R`` is a sum over parameters of a function of that
parameter alone, adding ``dR/dW`` to ``W.grad`` gives exactly the gradient of
``loss + R``: backpropagation is linear, so ``d(loss + R)/dW = dloss/dW + dR/dW``. The optimizer
therefore sees the same gradient as if ``R`` were part of the objective (coupled regularization,
which, unlike decoupled ``--weight-decay``, goes through momentum and adaptive
preconditioners). The tests check ``add_gradient`` against ``torch.autograd.grad`` of
``penalty``.

``params`` and ``initial_params`` are matching lists of tensors; the penalty applies to every
tensor passed (which ones is the caller's choice). Parameters whose ``.grad`` is ``None`` get no
gradient added. ``penalty`` is differentiable; call it under ``torch.no_grad()`` for logging.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from initmem_core.errors import ConfigError


def _check_coefficient(coefficient: float) -> float:
    coefficient = float(coefficient)
    if not coefficient >= 0 or coefficient == float("inf"):
        raise ConfigError(f"--l2 must be a finite number >= 0, got {coefficient}")
    return coefficient


def _with_grads(params: Sequence[torch.Tensor], others: Sequence[torch.Tensor] | None = None):
    """The (grads, params[, others]) of the parameters that have a gradient."""
    keep = [i for i, p in enumerate(params) if p.grad is not None]
    grads = [params[i].grad for i in keep]
    values = [params[i].detach() for i in keep]
    if others is None:
        return grads, values, None
    return grads, values, [others[i].detach() for i in keep]


def _sum_of_squares(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    if not tensors:
        return torch.zeros(())
    return torch.stack([t.pow(2).sum() for t in tensors]).sum()


def _check_lengths(params: Sequence[torch.Tensor], initial_params: Sequence[torch.Tensor]) -> None:
    if len(params) != len(initial_params):
        raise ValueError(f"params ({len(params)}) and initial_params ({len(initial_params)}) must match")


class L2Penalty:
    """Coupled L2: ``R(W) = lambda/2 * sum_i ||W_i||^2``, ``dR/dW_i = lambda * W_i``.

    ``initial_params`` is accepted for the common interface and ignored.
    """

    def __init__(self, coefficient: float):
        self.coefficient = _check_coefficient(coefficient)

    def add_gradient(
        self, params: Sequence[torch.Tensor], initial_params: Sequence[torch.Tensor] | None = None
    ) -> None:
        if self.coefficient == 0:
            return
        with torch.no_grad():
            grads, values, _ = _with_grads(params)
            if grads:
                torch._foreach_add_(grads, values, alpha=self.coefficient)

    def penalty(
        self, params: Sequence[torch.Tensor], initial_params: Sequence[torch.Tensor] | None = None
    ) -> torch.Tensor:
        return 0.5 * self.coefficient * _sum_of_squares(list(params))

    def __repr__(self) -> str:
        return f"L2Penalty(coefficient={self.coefficient:g})"


class L2InitPenalty:
    """Pull toward the initialization: ``R(W) = lambda/2 * sum_i ||W_i - W0_i||^2``.

    ``dR/dW_i = lambda * (W_i - W0_i)``. Unlike ``l2`` it does not shrink the norm toward 0 but
    anchors the weights to where they started, so it *preserves* initialization memory: a
    control for the forgetting experiments.
    """

    def __init__(self, coefficient: float):
        self.coefficient = _check_coefficient(coefficient)

    def add_gradient(self, params: Sequence[torch.Tensor], initial_params: Sequence[torch.Tensor]) -> None:
        _check_lengths(params, initial_params)
        if self.coefficient == 0:
            return
        with torch.no_grad():
            grads, values, initial = _with_grads(params, initial_params)
            if grads:
                differences = torch._foreach_sub(values, initial)
                torch._foreach_add_(grads, differences, alpha=self.coefficient)

    def penalty(self, params: Sequence[torch.Tensor], initial_params: Sequence[torch.Tensor]) -> torch.Tensor:
        _check_lengths(params, initial_params)
        differences = [p - p0.detach() for p, p0 in zip(params, initial_params)]
        return 0.5 * self.coefficient * _sum_of_squares(differences)

    def __repr__(self) -> str:
        return f"L2InitPenalty(coefficient={self.coefficient:g})"
