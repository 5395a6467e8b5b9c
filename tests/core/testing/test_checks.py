"""initmem_core.testing: the pytest plugin, the registry fixture, smoke_train and the contract
checks, which must pass for the built-ins and fail, naming the problem, for broken components."""

from __future__ import annotations

import pytest
import torch

import initmem_core.testing
from initmem_core import hookimpl
from initmem_core.contracts import DatasetBundle
from initmem_core.errors import PluginLoadError
from initmem_core.plugin_system.loader import get_registry, load_registry, set_registry
from initmem_core.testing import (
    check_architecture,
    check_dataset,
    check_initializer,
    check_metric,
    check_optimizer,
    check_regularizer,
    registered_plugins,
    smoke_train,
)
from tests.support.fresh_imports import assert_imports_none_of


@pytest.mark.slow  # starts a process
def test_importing_the_pytest_plugin_imports_no_torch():
    assert_imports_none_of("import initmem_core.testing", "torch")


def test_pytest_loads_it_through_the_pytest11_entry_point(pytestconfig):
    assert pytestconfig.pluginmanager.get_plugin("initmem") is initmem_core.testing


class OneOptimizer:
    @hookimpl
    def initmem_register_optimizers(self, register):
        register("plain", lambda model, config: torch.optim.SGD(model.parameters(), lr=config.lr), "plain SGD")


def test_initmem_registry_fixture_registers_a_plugin_object(initmem_registry):
    registry = initmem_registry(OneOptimizer())
    assert get_registry() is registry
    assert registry.lookup("optimizer", "plain")[0].provider.plugin == "OneOptimizer"
    assert "sgd" in registry.names("optimizer")  # the built-ins stay


def test_registered_plugins_puts_the_previous_registry_back():
    previous = load_registry(entry_points=False)
    set_registry(previous)
    with registered_plugins(OneOptimizer()) as registry:
        assert get_registry() is registry is not previous
    assert get_registry() is previous


def test_registered_plugins_loads_strictly():
    class Misspelt:
        @hookimpl
        def initmem_register_optimisers(self, register):
            register("never", "x:y", "")

    with pytest.raises(PluginLoadError, match="unknown hook initmem_register_optimisers"):
        with registered_plugins(Misspelt()):
            pass


def test_smoke_train_takes_the_steps_asked_for():
    result = smoke_train("optimizer", "sgd", steps=3, lr=0.02)
    assert result.status == "FINISHED"
    assert result.history[-1]["clock_adapt"] == pytest.approx(3 * 0.02)  # sum of the lr of each step


def test_smoke_train_turns_a_regularizer_on():
    assert "reg_penalty" in smoke_train("regularizer", "l2-init", steps=2).history[-1]


def test_smoke_train_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown kind 'optimiser'"):
        smoke_train("optimiser", "sgd")


@pytest.mark.parametrize(
    ("check", "name"),
    [
        (check_architecture, "resnet20"),
        (check_optimizer, "sgd"),
        (check_optimizer, "adam"),
        (check_optimizer, "muon"),
        (check_optimizer, "adamw"),
        (check_optimizer, "timm:lion"),
        (check_initializer, "fan-in"),
        (check_initializer, "scaled-default"),
        (check_regularizer, "l2"),
        (check_regularizer, "l2-init"),
        (check_metric, "weight-norms"),
        (check_dataset, "synthetic"),
        (check_dataset, "synthetic:1x8x8-c3-n40"),
    ],
)
def test_builtins_satisfy_their_contract(check, name):
    check(name)


def test_timm_sgd_steps_as_its_family_declares_it():
    # timm's SGD is Nesterov by default, which needs momentum; it sums gradients (heavy ball).
    check_optimizer("timm:sgd", momentum=0.9)


# -- broken components: each check must catch its own kind of mistake -------------------------


def _dataset(labels_offset: int = 0, honour_train_size: bool = True):
    def load(config) -> DatasetBundle:
        generator = torch.Generator().manual_seed(0)
        images = torch.rand(60, 1, 4, 4, generator=generator)
        labels = torch.arange(60) % 3 + labels_offset
        n = config.train_size if honour_train_size and config.train_size else 40
        return DatasetBundle(
            "broken",
            images[:n],
            labels[:n],
            images[40:50],
            labels[40:50],
            images[50:],
            labels[50:],
            num_classes=3,
            mean=(0.5,),
            std=(0.3,),
        )

    return load


class SkipsBiases:
    def __init__(self, model, config):
        self.inner = torch.optim.SGD([p for p in model.parameters() if p.ndim > 1], lr=config.lr)


class Half:
    """An L2 penalty whose add_gradient adds only half of the gradient."""

    def __init__(self, coefficient):
        self.coefficient = coefficient

    def penalty(self, params, initial_params):
        return 0.5 * self.coefficient * sum(p.pow(2).sum() for p in params)

    def add_gradient(self, params, initial_params):
        for p in params:
            p.grad.add_(0.5 * self.coefficient * p.detach())


class Overwrites(Half):
    def add_gradient(self, params, initial_params):
        for p in params:
            p.grad = self.coefficient * p.detach()


class ReturnsNan:
    def compute(self, state):
        return {"broken": float("nan")}


class ReturnsTensor:
    def compute(self, state):
        return {"broken": torch.tensor(1.0)}


@torch.no_grad()
def _global_rng_init(model, sigma, generator):
    for p in model.parameters():
        if p.ndim > 1:
            p.copy_(sigma * torch.randn(p.shape))


@torch.no_grad()
def _squared_sigma_init(model, sigma, generator):
    for p in model.parameters():
        if p.ndim > 1:
            p.copy_(sigma**2 * torch.randn(p.shape, generator=generator))


class Broken:
    @hookimpl
    def initmem_register_architectures(self, register):
        register(
            "ten-classes",
            lambda in_channels, num_classes, image_size: torch.nn.Sequential(
                torch.nn.Flatten(), torch.nn.LazyLinear(10)
            ),
            "ignores num_classes",
        )
        register(
            "no-kernels",
            lambda in_channels, num_classes, image_size: torch.nn.Sequential(
                torch.nn.Flatten(),
                torch.nn.Unflatten(1, (in_channels * image_size * image_size, 1)),
                torch.nn.AdaptiveAvgPool1d(num_classes),
                torch.nn.Flatten(),
            ),
            "no parameters at all",
        )

    @hookimpl
    def initmem_register_optimizers(self, register):
        register("skips-biases", lambda model, config: SkipsBiases(model, config).inner, "")
        register("frozen", lambda model, config: torch.optim.SGD(model.parameters(), lr=0.0), "")
        register("not-an-optimizer", lambda model, config: object(), "")
        # Declares heavy-ball (the default) but averages its momentum, as Adam does.
        register("misdeclared", lambda model, config: torch.optim.Adam(model.parameters(), lr=config.lr), "")

    @hookimpl
    def initmem_register_initializers(self, register):
        register("global-rng", _global_rng_init, "")
        register("squared-sigma", _squared_sigma_init, "")

    @hookimpl
    def initmem_register_regularizers(self, register):
        register("half", Half, "")
        register("overwrites", Overwrites, "")

    @hookimpl
    def initmem_register_metrics(self, register):
        register("nan", ReturnsNan, "")
        register("tensor", ReturnsTensor, "")

    @hookimpl
    def initmem_register_datasets(self, register):
        register("bad-labels", _dataset(labels_offset=1), "")
        register("ignores-train-size", _dataset(honour_train_size=False), "")
        register("misdeclared-shape", _dataset(), "", shape=(3, 4, 4), classes=3, splits=(40, 10, 10))
        register("misdeclared-classes", _dataset(), "", shape=(1, 4, 4), classes=10, splits=(40, 10, 10))


@pytest.mark.parametrize(
    ("check", "name", "message"),
    [
        (check_architecture, "ten-classes", "logits have shape (2, 10), expected (2, 4)"),
        (check_architecture, "no-kernels", "no trainable parameters"),
        (check_optimizer, "skips-biases", "was not given these trainable parameters: 0.bias, 3.bias"),
        (check_optimizer, "frozen", "left these parameters unchanged: 0.weight, 0.bias, 3.weight, 3.bias"),
        (check_optimizer, "not-an-optimizer", "returned object, not a torch.optim.Optimizer"),
        (check_optimizer, "misdeclared", "as built steps by an effective 0.01 (heavy-ball convention), not the 0.1"),
        (check_initializer, "global-rng", "is not paired: kernel 0.weight at sigma=2 is not 2 x"),
        (check_initializer, "squared-sigma", "is not paired"),
        (check_regularizer, "half", "did not add the gradient of penalty() to params[0].grad"),
        (check_regularizer, "overwrites", "did not add the gradient"),
        (check_metric, "nan", "returned broken=nan, not a finite number"),
        (check_metric, "tensor", "return plain numbers"),
        (check_dataset, "bad-labels", "labels span 1..3, outside 0..2"),
        (check_dataset, "ignores-train-size", "--train-size 20 gave 40 training examples instead of 20"),
        (check_dataset, "misdeclared-shape", "declares images (3, 4, 4) but builds (1, 4, 4)"),
        (check_dataset, "misdeclared-classes", "declares 10 classes but builds 3"),
    ],
)
def test_checks_catch_broken_components(check, name, message, initmem_registry):
    initmem_registry(Broken())
    with pytest.raises(AssertionError) as failure:
        check(name)
    assert message in str(failure.value)
