"""Built-in optimizer plugins: each builds through the registry and steps every parameter."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch import nn

from initmem_core import RunConfig
from initmem_core.errors import ConfigError
from tests.support.fresh_imports import assert_imports_none_of


class SmallNet(nn.Module):
    """conv-BN-ReLU x2, global pool, Linear head: the shapes a CIFAR ResNet has."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


def one_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Take one step; return the names of parameters with a gradient that did not change."""
    torch.manual_seed(1)
    x, y = torch.randn(6, 3, 8, 8), torch.randint(0, 10, (6,))
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer.step()
    return [n for n, p in model.named_parameters() if p.grad is not None and torch.equal(before[n], p.detach())]


def build(registry, name: str, model: nn.Module, **config):
    return registry.build("optimizer", name, model=model, config=RunConfig(opt=name, **config))


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw", "muon", "timm:lion", "timm:adamw"])
def test_builds_and_one_step_changes_every_parameter(registry, name):
    torch.manual_seed(0)
    model = SmallNet()
    optimizer = build(registry, name, model, lr=0.01)
    assert isinstance(optimizer, torch.optim.Optimizer)
    covered = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert covered == {id(p) for p in model.parameters()}
    assert one_step(model, optimizer) == []


def test_sgd_settings_follow_the_config(registry):
    optimizer = build(registry, "sgd", SmallNet(), lr=0.1)
    (group,) = optimizer.param_groups
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.1, 0.0, 0.0)
    optimizer = build(registry, "sgd", SmallNet(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    assert (optimizer.param_groups[0]["momentum"], optimizer.param_groups[0]["weight_decay"]) == (0.9, 5e-4)


def test_adam_and_adamw_weight_decay(registry):
    adam = build(registry, "adam", SmallNet(), lr=1e-3, weight_decay=1e-2)
    adamw = build(registry, "adamw", SmallNet(), lr=1e-3)
    assert type(adam) is torch.optim.Adam and adam.param_groups[0]["weight_decay"] == 1e-2
    assert type(adamw) is torch.optim.AdamW and adamw.param_groups[0]["weight_decay"] == 0.0


def test_only_trainable_parameters(registry):
    model = SmallNet()
    model.conv1.weight.requires_grad_(False)
    optimizer = build(registry, "sgd", model)
    assert all(p is not model.conv1.weight for p in optimizer.param_groups[0]["params"])


def test_muon_param_groups(registry):
    from timm.optim import Muon

    model = SmallNet()
    optimizer = build(registry, "muon", model, lr=0.02, weight_decay=1e-4)
    assert isinstance(optimizer, Muon)
    groups = optimizer.initmem_param_groups
    assert groups["muon"] == ["conv1.weight", "conv2.weight"]
    assert sorted(groups["adamw_fallback"]) == sorted(
        ["bn1.weight", "bn1.bias", "conv2.bias", "bn2.weight", "bn2.bias", "fc.weight", "fc.bias"]
    )
    by_id = {id(p): n for n, p in model.named_parameters()}
    for group in optimizer.param_groups:
        names = [by_id[id(p)] for p in group["params"]]
        if group.get("use_fallback"):
            assert names == groups["adamw_fallback"]
        else:
            assert group["use_muon"] is True and names == groups["muon"]
        assert group["conv_mode"] == "flatten" and group["lr"] == 0.02 and group["weight_decay"] == 1e-4
    assert one_step(model, optimizer) == []
    routed = {by_id[id(p)]: state["use_muon"] for p, state in optimizer.state.items()}
    assert routed["conv1.weight"] and routed["conv2.weight"] and not routed["fc.weight"]


def test_muon_head_is_the_last_linear_even_if_not_named_fc(registry):
    model = nn.Sequential(nn.Flatten(), nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 16))
    optimizer = build(registry, "muon", model)
    assert optimizer.initmem_param_groups["muon"] == ["1.weight"]
    assert optimizer.initmem_param_groups["adamw_fallback"] == ["1.bias", "3.weight", "3.bias"]


def test_muon_momentum(registry):
    assert build(registry, "muon", SmallNet()).param_groups[0]["momentum"] == 0.95
    assert build(registry, "muon", SmallNet(), momentum=0.9).param_groups[0]["momentum"] == 0.9


def test_timm_family_passes_the_config(registry):
    optimizer = build(registry, "timm:lion", SmallNet(), lr=3e-4, weight_decay=0.1)
    assert type(optimizer).__name__ == "Lion"
    assert {g["lr"] for g in optimizer.param_groups} == {3e-4}
    # timm leaves 1-D parameters out of weight decay; the groups are recorded.
    assert set(optimizer.initmem_param_groups) == {"weight_decay=0", "weight_decay=0.1"}
    assert "fc.weight" in optimizer.initmem_param_groups["weight_decay=0.1"]
    assert "bn1.weight" in optimizer.initmem_param_groups["weight_decay=0"]


def test_unknown_timm_optimizer_is_a_config_error(registry):
    with pytest.raises(ConfigError, match="unknown timm optimizer 'lionn'.*lion") as info:
        build(registry, "timm:lionn", SmallNet())
    assert "\n" not in str(info.value)


def test_a_timm_optimizer_of_a_library_not_here_is_a_config_error(registry):
    """timm names apex's optimizers by import path: without apex (or CUDA), planning a run of one
    is refused in one line, as building it is."""
    from initmem_core.training.plan import plan_run

    if importlib.util.find_spec("apex") is not None:
        pytest.skip("apex is installed")
    with pytest.raises(ConfigError, match="timm optimizer 'fusedsgd' is unavailable here") as info:
        plan_run(RunConfig(opt="timm:fusedsgd"), registry)
    assert "\n" not in str(info.value)


@pytest.mark.slow  # starts a process
def test_registering_imports_no_torch():
    code = """
        import initmem_plugins.optimizers as optimizers
        import initmem_plugins.regularizers as regularizers
        import initmem_core.training.schedules
        names = []
        optimizers.initmem_register_optimizers(lambda name, factory, description, **declared: names.append(name))
        regularizers.initmem_register_regularizers(lambda name, factory, description: names.append(name))
        assert names == ["sgd", "adam", "adamw", "muon", "timm:*", "l2", "l2-init"], names
    """
    assert_imports_none_of(code, "torch", "timm")
