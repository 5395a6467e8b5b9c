"""Built-in architectures: published parameter counts, shapes on tiny and CIFAR inputs, timm bridge."""

from __future__ import annotations

import pytest
import torch

import initmem_plugins.architectures as architectures
from initmem_core.errors import ConfigError
from initmem_plugins.architectures.cifar_resnet import ShortcutA, build_cifar_resnet
from tests.support.cli_processes import stored_runs
from tests.support.fresh_imports import assert_imports_none_of

CIFAR_DEPTHS = {"resnet20": 3, "resnet32": 5, "resnet44": 7, "resnet56": 9, "resnet110": 18}
OWN_ARCHS = ["resnet9", *CIFAR_DEPTHS]


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def cifar_resnet_count(blocks: int, in_channels: int = 3, classes: int = 10) -> int:
    """Count by hand: 3x3 convs without bias, BN (weight + bias) after each, option-A shortcuts."""
    total = in_channels * 16 * 9 + 2 * 16  # stem conv + BN
    width = 16
    for out in (16, 32, 64):
        for index in range(blocks):
            cin = width if index == 0 else out
            total += cin * out * 9 + out * out * 9 + 2 * (2 * out)
        width = out
    return total + 64 * classes + classes  # Linear(64, classes) with bias


def build(registry, name, in_channels=3, num_classes=10, image_size=32):
    torch.manual_seed(0)
    return registry.build("architecture", name, in_channels=in_channels, num_classes=num_classes, image_size=image_size)


def test_registers_exactly_the_builtin_names():
    names = []
    architectures.initmem_register_architectures(register=lambda name, factory, description, **_: names.append(name))
    assert sorted(names) == sorted([*OWN_ARCHS, "timm:*"])


def test_published_parameter_counts(registry):
    # He et al. (2016) and the Myrtle ResNet-9, 10 classes.
    assert n_params(build(registry, "resnet56")) == 853_018
    assert n_params(build(registry, "resnet110")) == 1_727_962
    assert n_params(build(registry, "resnet9")) == 6_573_120


@pytest.mark.parametrize("name, blocks", CIFAR_DEPTHS.items())
def test_cifar_resnet_counts_match_hand_count(registry, name, blocks):
    assert n_params(build(registry, name)) == cifar_resnet_count(blocks)


def test_shallow_cifar_resnet_counts():
    # Derived with cifar_resnet_count; each 2 extra blocks per stage add 194,432 parameters.
    # (Counts like 272,474 for ResNet-20 include option-B projection shortcuts: +2,752.)
    assert [cifar_resnet_count(n) for n in (3, 5, 7)] == [269_722, 464_154, 658_586]


def test_in_channels_and_classes_change_only_stem_and_head():
    assert n_params(build_cifar_resnet(20, in_channels=1, num_classes=7)) == cifar_resnet_count(3, 1, 7)


def test_option_a_shortcut_has_no_parameters_and_pads_zeros():
    model = build_cifar_resnet(56, in_channels=3, num_classes=10)
    shortcuts = [m for m in model.modules() if isinstance(m, ShortcutA)]
    assert len(shortcuts) == 2  # entering stages 2 and 3
    assert all(not list(s.parameters()) and not list(s.buffers()) for s in shortcuts)

    x = torch.randn(2, 16, 9, 9)
    y = ShortcutA(16, 32, stride=2)(x)
    assert y.shape == (2, 32, 5, 5)
    assert torch.equal(y[:, 8:24], x[:, :, ::2, ::2])
    assert not y[:, :8].any() and not y[:, 24:].any()


@pytest.mark.parametrize("name", OWN_ARCHS)
@pytest.mark.parametrize("in_channels, image_size", [(1, 8), (3, 32), (2, 13)])
def test_forward_shapes(registry, name, in_channels, image_size):
    model = build(registry, name, in_channels=in_channels, num_classes=10, image_size=image_size)
    logits = model(torch.randn(2, in_channels, image_size, image_size))
    assert logits.shape == (2, 10)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("in_channels, image_size", [(1, 8), (3, 32)])
def test_timm_model_forward(registry, in_channels, image_size):
    model = build(registry, "timm:resnet18", in_channels=in_channels, num_classes=10, image_size=image_size)
    assert model(torch.randn(2, in_channels, image_size, image_size)).shape == (2, 10)


def test_timm_model_with_fixed_input_size_gets_image_size(registry):
    model = build(registry, "timm:vit_tiny_patch16_224", in_channels=3, num_classes=10, image_size=32)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_unknown_timm_model_is_a_config_error_with_suggestions(registry):
    with pytest.raises(ConfigError) as caught:
        build(registry, "timm:resnet1800")
    message = str(caught.value)
    assert "resnet1800" in message and "timm:resnet18" in message
    assert "\n" not in message


@pytest.mark.slow  # starts a process
def test_registering_imports_no_torch():
    code = (
        "import sys\n"
        "import initmem_plugins.architectures, initmem_plugins.initializers\n"
        "assert 'torch' not in sys.modules, 'importing the plugin modules imported torch'\n"
        "from initmem_core.plugin_system.loader import load_registry\n"
        "registry = load_registry(entry_points=False)\n"
        "assert 'resnet56' in registry.names('architecture')\n"
    )
    assert_imports_none_of(code, "torch", "timm")


def test_an_arch_arg_reaches_the_factory_typed(registry, monkeypatch):
    """``--arch-arg key=value``: a keyword argument of the factory, its value a literal; the
    default (none) leaves every config hash as it was."""
    import initmem_plugins.architectures.timm_models as bridge
    from initmem_core.config import RunConfig, from_mapping
    from initmem_core.training.plan import plan_run

    config = from_mapping({"arch": "timm:resnet10t", "arch_arg": "drop_rate=0.25,zero_init_last=false"})
    assert config.arch_arg == ("drop_rate=0.25", "zero_init_last=false")
    plan = plan_run(config, registry)
    assert dict(plan.arch_options) == {"drop_rate": 0.25, "zero_init_last": False}
    seen: dict = {}
    create = bridge.timm.create_model
    monkeypatch.setattr(bridge.timm, "create_model", lambda *a, **kw: seen.update(kw) or create(*a, **kw))
    model = plan.components["architecture"].build(in_channels=1, num_classes=10, image_size=8, **plan.arch_options)
    assert seen["drop_rate"] == 0.25 and seen["zero_init_last"] is False and model.drop_rate == 0.25
    assert (
        RunConfig(arch_arg=()).config_hash()
        == RunConfig().config_hash()
        != config.replace(arch="resnet20").config_hash()
    )
    assert plan_run(config.replace(arch_arg=("depth=3",)), registry).arch_options["depth"] == 3  # a whole number


def test_an_arch_arg_the_factory_does_not_take_is_one_line(tracking_uri):
    from typer.testing import CliRunner

    from initmem_cli.app import app

    uri = tracking_uri
    for arch, arg, says in [
        ("resnet20", "width=2", "--arch-arg width: architecture resnet20 does not take it: it takes none"),
        ("timm:resnet10t", "foo=1", "--arch-arg foo: timm model resnet10t does not take it"),
        (
            "resnet20",
            "num_classes=3",
            "--arch-arg num_classes: architecture resnet20 does not take it: initmem sets it",
        ),
        ("resnet20", "width", "--arch-arg 'width': write key=value, e.g. --arch-arg drop_rate=0.1"),
    ]:
        args = ["--arch", arch, "--arch-arg", arg, "--epochs", "1", "--train-size", "64", "--tracking-uri", uri]
        result = CliRunner().invoke(app, ["run", *args])
        assert result.exit_code == 2, result.output
        [line] = [line for line in result.output.splitlines() if line.strip()]
        assert says in line and "Traceback" not in result.output
    assert not stored_runs(uri)  # nothing half-written
