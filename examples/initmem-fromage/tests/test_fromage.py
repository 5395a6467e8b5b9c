"""Fromage's update against a hand computation, and the plugin's registration."""

from __future__ import annotations

import importlib.metadata
import math

import pytest
import torch
from initmem_fromage import plugin
from initmem_fromage.optimizer import Fromage

from initmem_core import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.loader import load_registry


def test_step_matches_hand_computation():
    # W = [3, 4] (norm 5), g = [0, 2] (norm 2), lr = 0.5:
    # W - 0.5 * 5/2 * g = [3, 4 - 2.5] = [3, 1.5]; divided by sqrt(1.25).
    w = torch.tensor([3.0, 4.0], requires_grad=True)
    w.grad = torch.tensor([0.0, 2.0])
    Fromage([w], lr=0.5).step()
    expected = torch.tensor([3.0, 1.5]) / math.sqrt(1.25)
    torch.testing.assert_close(w.detach(), expected)


def test_step_on_a_matrix_and_relative_step_size():
    torch.manual_seed(0)
    w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 3, dtype=torch.float64)
    w.grad = g.clone()
    before = w.detach().clone()
    lr = 0.1
    Fromage([w], lr=lr).step()
    expected = (before - lr * before.norm() / g.norm() * g) / math.sqrt(1 + lr**2)
    torch.testing.assert_close(w.detach(), expected)
    # Before the rescale the step has size lr * ||W||: the relative step size is lr.
    step = w.detach() * math.sqrt(1 + lr**2) - before
    assert step.norm().item() == pytest.approx(lr * before.norm().item())


def test_zero_norm_falls_back_to_a_gradient_step():
    w = torch.zeros(3, requires_grad=True)
    w.grad = torch.tensor([1.0, -2.0, 0.5])
    Fromage([w], lr=0.2).step()
    torch.testing.assert_close(w.detach(), -0.2 * torch.tensor([1.0, -2.0, 0.5]) / math.sqrt(1.04))

    v = torch.tensor([1.0, 2.0], requires_grad=True)
    v.grad = torch.zeros(2)
    Fromage([v], lr=0.2).step()  # zero gradient: only the 1/sqrt(1+lr^2) shrink
    torch.testing.assert_close(v.detach(), torch.tensor([1.0, 2.0]) / math.sqrt(1.04))


def test_p_bound_caps_the_norm():
    w = torch.tensor([1.0, 0.0], requires_grad=True)
    optimizer = Fromage([w], lr=0.5, p_bound=1.0)
    for _ in range(3):
        w.grad = torch.tensor([0.0, -1.0])
        optimizer.step()
        assert w.detach().norm().item() <= 1.0 + 1e-6


def test_plugin_registers_and_builds():
    registry = load_registry(entry_points=False, extra_plugins=[("fromage", plugin)])
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    optimizer = registry.build("optimizer", "fromage", model=model, config=RunConfig(opt="fromage", lr=0.01))
    assert isinstance(optimizer, Fromage)
    model(torch.randn(5, 3)).pow(2).sum().backward()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.step()
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


def test_plugin_rejects_weight_decay():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ConfigError, match="weight decay"):
        plugin.build_fromage(model=model, config=RunConfig(weight_decay=1e-4))


def test_installed_entry_point_is_found():
    try:
        importlib.metadata.distribution("initmem-fromage")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("initmem-fromage is not pip-installed")
    registry = load_registry()
    spec, _ = registry.lookup("optimizer", "fromage")
    assert spec.provider.package == "initmem-fromage"
