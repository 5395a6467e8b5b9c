"""Built-in regularizers: add_gradient is exactly the autograd gradient of the penalty."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from initmem_core.errors import ConfigError


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.Flatten(), nn.Linear(12, 4))


def perturbed_copy(model: nn.Module) -> list[torch.Tensor]:
    """'Initial' parameters that differ from the current ones."""
    return [(p.detach() + 0.3 * torch.randn_like(p)) for p in model.parameters()]


@pytest.mark.parametrize("name", ["l2", "l2-init"])
def test_add_gradient_equals_autograd_of_penalty(registry, name):
    model = small_model()
    params = list(model.parameters())
    initial = perturbed_copy(model)
    reg = registry.build("regularizer", name, coefficient=0.37)
    assert reg.coefficient == 0.37

    expected = torch.autograd.grad(reg.penalty(params, initial), params)
    for p in params:
        p.grad = torch.randn_like(p)  # a loss gradient already there
    loss_grads = [p.grad.clone() for p in params]
    reg.add_gradient(params, initial)
    for p, g, e in zip(params, loss_grads, expected):
        torch.testing.assert_close(p.grad, g + e)
        assert not p.grad.requires_grad


@pytest.mark.parametrize("name", ["l2", "l2-init"])
def test_adding_the_gradient_is_adding_the_penalty_to_the_loss(registry, name):
    model = small_model()
    params = list(model.parameters())
    initial = perturbed_copy(model)
    reg = registry.build("regularizer", name, coefficient=0.05)
    x = torch.randn(5, 2, 4, 4)

    loss = model(x).pow(2).mean() + reg.penalty(params, initial)
    expected = torch.autograd.grad(loss, params)

    model(x).pow(2).mean().backward()
    reg.add_gradient(params, initial)
    for p, e in zip(params, expected):
        torch.testing.assert_close(p.grad, e)


def test_penalty_values(registry):
    w = torch.tensor([3.0, 4.0])
    w0 = torch.tensor([1.0, 1.0])
    assert registry.build("regularizer", "l2", coefficient=0.1).penalty([w], [w0]).item() == pytest.approx(
        0.5 * 0.1 * 25
    )
    assert registry.build("regularizer", "l2-init", coefficient=0.1).penalty([w], [w0]).item() == pytest.approx(
        0.5 * 0.1 * 13
    )
    assert registry.build("regularizer", "l2-init", coefficient=0.1).penalty([w], [w.clone()]).item() == 0.0


def test_params_without_grad_are_skipped(registry):
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(2, requires_grad=True)
    a.grad = torch.zeros(2)
    for name in ("l2", "l2-init"):
        registry.build("regularizer", name, coefficient=1.0).add_gradient([a, b], [torch.zeros(2), torch.zeros(2)])
    assert b.grad is None
    torch.testing.assert_close(a.grad, torch.full((2,), 2.0))


def test_zero_coefficient_is_a_no_op(registry):
    a = torch.ones(2, requires_grad=True)
    a.grad = torch.zeros(2)
    registry.build("regularizer", "l2", coefficient=0.0).add_gradient([a], [torch.zeros(2)])
    assert torch.equal(a.grad, torch.zeros(2))


def test_negative_coefficient_is_a_config_error(registry):
    with pytest.raises(ConfigError, match="--l2"):
        registry.build("regularizer", "l2", coefficient=-1.0)
