"""Built-in initializers: pairing across sigma (W0 = sigma * Z exactly), fan-in statistics, resets."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import initmem_plugins.initializers as initializers
from initmem_core.kernels import fan_in, kernel_parameters
from initmem_plugins.architectures.cifar_resnet import build_cifar_resnet
from initmem_plugins.initializers.fan_in import fan_in_init


def initialized(registry, init, sigma, seed, build_seed=0):
    """What a run does: seed the global RNG, build, then apply the initializer with a seeded generator."""
    torch.manual_seed(seed if init == "scaled-default" else build_seed)
    model = build_cifar_resnet(20, in_channels=1, num_classes=10)
    generator = torch.Generator().manual_seed(seed)
    registry.build("initializer", init, model=model, sigma=sigma, generator=generator)
    return model


def kernels(model):
    return [weight.detach().clone() for _, weight in kernel_parameters(model)]


def test_registers_exactly_the_builtin_names():
    names = []
    initializers.initmem_register_initializers(register=lambda name, factory, description: names.append(name))
    assert sorted(names) == ["fan-in", "scaled-default"]


@pytest.mark.parametrize("init", ["fan-in", "scaled-default"])
def test_paired_across_sigma(registry, init):
    one = kernels(initialized(registry, init, sigma=1.0, seed=3))
    two = kernels(initialized(registry, init, sigma=2.0, seed=3))
    half = kernels(initialized(registry, init, sigma=0.5, seed=3))
    assert len(one) == 20  # ResNet-20: 19 convs + the linear head
    assert all(torch.equal(b, 2 * a) for a, b in zip(one, two))
    assert all(torch.equal(c, 0.5 * a) for a, c in zip(one, half))


@pytest.mark.parametrize("init", ["fan-in", "scaled-default"])
def test_different_seeds_differ(registry, init):
    first = kernels(initialized(registry, init, sigma=1.0, seed=0))
    second = kernels(initialized(registry, init, sigma=1.0, seed=1))
    assert all(not torch.equal(a, b) for a, b in zip(first, second))


def test_fan_in_draw_depends_only_on_generator(registry):
    a = kernels(initialized(registry, "fan-in", sigma=1.0, seed=5, build_seed=0))
    b = kernels(initialized(registry, "fan-in", sigma=1.0, seed=5, build_seed=99))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("layer", [nn.Conv2d(256, 256, 3), nn.Linear(2048, 512)])
def test_fan_in_std(registry, layer):
    sigma = 1.7
    registry.build("initializer", "fan-in", model=layer, sigma=sigma, generator=torch.Generator().manual_seed(0))
    expected = sigma / math.sqrt(fan_in(layer.weight))
    # ~6e5 / 1e6 draws: the sample std is within ~0.1% of the truth; 2% is a wide margin.
    assert layer.weight.std().item() == pytest.approx(expected, rel=0.02)
    assert abs(layer.weight.mean().item()) < 0.01 * expected


def test_fan_in_counts_groups_and_kernel_elements():
    assert fan_in(nn.Conv2d(64, 32, 3, groups=4).weight) == 16 * 9
    assert fan_in(nn.Conv1d(8, 4, 5).weight) == 8 * 5
    assert fan_in(nn.Conv3d(2, 4, 3).weight) == 2 * 27
    assert fan_in(nn.Linear(7, 3).weight) == 7


def small_model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, bias=True),
        nn.BatchNorm2d(8),
        nn.GroupNorm(2, 8),
        nn.Flatten(),
        nn.LayerNorm(8 * 6 * 6),
        nn.Linear(8 * 6 * 6, 5, bias=True),
    )


def scramble(model):
    """Move every parameter and BN statistic away from its default."""
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(0.5, 1.5)
        for b in model.buffers():
            if b.is_floating_point():
                b.uniform_(0.5, 1.5)


def test_fan_in_zeroes_biases_and_resets_norm_layers(registry):
    model = small_model()
    scramble(model)
    registry.build("initializer", "fan-in", model=model, sigma=1.0, generator=torch.Generator().manual_seed(0))
    conv, bn, gn, _, ln, linear = model
    assert not conv.bias.any() and not linear.bias.any()
    for norm in (bn, gn, ln):
        assert torch.equal(norm.weight, torch.ones_like(norm.weight))
        assert not norm.bias.any()
    assert not bn.running_mean.any() and torch.equal(bn.running_var, torch.ones_like(bn.running_var))


def test_scaled_default_leaves_biases_and_norm_layers_as_built(registry):
    model = small_model()
    scramble(model)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    registry.build("initializer", "scaled-default", model=model, sigma=3.0, generator=None)
    for name, p in model.named_parameters():
        expected = before[name] * 3.0 if name in {"0.weight", "5.weight"} else before[name]
        assert torch.equal(p, expected), name


def test_kernel_parameters_are_conv_and_linear_weights_once():
    shared = nn.Linear(4, 4)
    model = nn.Sequential(nn.Conv1d(4, 4, 1), shared, nn.BatchNorm1d(4), nn.Linear(4, 4), nn.ReLU())
    model[3].weight = shared.weight  # tied weights count once
    assert [name for name, _ in kernel_parameters(model)] == ["0.weight", "1.weight"]
    assert [name for name, _ in kernel_parameters(nn.Linear(2, 2))] == ["weight"]


def test_fan_in_keeps_dtype():
    layer = nn.Linear(16, 4).to(torch.float64)
    reference = nn.Linear(16, 4)
    fan_in_init(model=layer, sigma=1.0, generator=torch.Generator().manual_seed(0))
    fan_in_init(model=reference, sigma=1.0, generator=torch.Generator().manual_seed(0))
    assert layer.weight.dtype == torch.float64
    assert torch.equal(layer.weight.float(), reference.weight)
