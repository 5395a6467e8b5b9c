"""The plugin loader: isolation of broken plugins, allow-listing, strict mode, name clashes."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core import hookimpl
from initmem_core.errors import DuplicateComponentError, PluginLoadError, UnknownComponentError
from initmem_core.kinds import KIND_NAMES
from initmem_core.plugin_system.loader import PluginLoadWarning, load_registry, set_registry
from tests.support.fresh_imports import assert_imports_none_of

runner = CliRunner()

GOOD_PLUGIN = """
from initmem_core import hookimpl

@hookimpl
def initmem_register_optimizers(register):
    register("fancy", "torch.optim:SGD", "A fancy optimizer")
"""


class ClashingSgd:
    @hookimpl
    def initmem_register_optimizers(self, register):
        register("sgd", "torch.optim:SGD", "another sgd")


def test_builtins_register_every_kind():
    registry = load_registry(entry_points=False)
    for kind in KIND_NAMES:
        assert registry.names(kind), f"no built-in {kind}"
    assert {"sgd", "adam", "adamw", "muon", "timm:*"} <= set(registry.names("optimizer"))
    assert {"resnet9", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110", "timm:*"} <= set(
        registry.names("architecture")
    )
    assert {"fan-in", "scaled-default"} <= set(registry.names("initializer"))
    assert {"l2", "l2-init"} <= set(registry.names("regularizer"))
    assert {"cifar10", "cifar100", "digits", "synthetic"} <= set(registry.names("dataset"))
    spec = registry.lookup("optimizer", "sgd")[0]
    assert spec.provider.package == "initmem"


@pytest.mark.slow  # starts a process
def test_registering_imports_no_torch():
    code = (
        "from initmem_core.plugin_system.loader import load_registry; r = load_registry(); "
        "r.lookup('optimizer', 'muon')"
    )
    assert_imports_none_of(code, "torch", "mlflow")


def test_family_lookup_passes_the_variant():
    registry = load_registry(entry_points=False)
    spec, variant = registry.lookup("optimizer", "timm:lion")
    assert spec.name == "timm:*" and variant == "lion"
    with pytest.raises(UnknownComponentError):
        registry.lookup("optimizer", "timm:")


def test_unknown_name_says_the_closest_and_lists_valid_names_sorted():
    registry = load_registry(entry_points=False)
    with pytest.raises(UnknownComponentError) as error:
        registry.lookup("optimizer", "mun")
    message = str(error.value)
    assert message.startswith("unknown optimizer 'mun' (did you mean 'muon'?); valid names: adam, adamw, ")
    assert error.value.valid == sorted(error.value.valid) and "\n" not in message
    with pytest.raises(UnknownComponentError) as error:
        registry.lookup("optimizer", "zzzz")
    assert str(error.value).startswith("unknown optimizer 'zzzz'; valid names: adam")  # nothing close: no guess


def test_third_party_plugin_loads_from_entry_point(install_fake_plugin):
    install_fake_plugin("fancyplug", GOOD_PLUGIN, version="2.5")
    registry = load_registry()
    spec, _ = registry.lookup("optimizer", "fancy")
    assert (spec.provider.plugin, spec.provider.package, spec.provider.version) == ("fancyplug", "fancyplug", "2.5")


def test_plugin_that_fails_to_import_is_skipped_with_one_line_warning(install_fake_plugin):
    install_fake_plugin("goodplug", GOOD_PLUGIN)
    install_fake_plugin("brokenplug", "import definitely_not_a_module\n")
    with pytest.warns(PluginLoadWarning) as warned:
        registry = load_registry()
    message = str(warned[0].message)
    assert "brokenplug" in message and "definitely_not_a_module" in message and "\n" not in message
    assert registry.lookup("optimizer", "fancy")  # its sibling still works
    assert registry.lookup("optimizer", "sgd")
    assert [f.plugin for f in registry.failures] == ["brokenplug"]


def test_invalid_hook_implementation_is_skipped(install_fake_plugin):
    install_fake_plugin(
        "badargs",
        """
from initmem_core import hookimpl

@hookimpl
def initmem_register_optimizers(register, not_a_hook_argument):
    register("never", "x:y", "")
""",
    )
    with pytest.warns(PluginLoadWarning, match="badargs"):
        registry = load_registry()
    assert "never" not in registry.names("optimizer")
    assert "not_a_hook_argument" in registry.failures[0].error


def test_misspelt_hook_name_is_an_invalid_plugin(install_fake_plugin):
    install_fake_plugin(
        "typo",
        """
from initmem_core import hookimpl

@hookimpl
def initmem_register_optimisers(register):
    register("never", "x:y", "")
""",
    )
    with pytest.warns(PluginLoadWarning, match="unknown hook initmem_register_optimisers"):
        registry = load_registry()
    assert [f.plugin for f in registry.failures] == ["typo"]


def test_plugin_that_raises_while_registering_is_skipped(install_fake_plugin):
    install_fake_plugin(
        "raiser",
        """
from initmem_core import hookimpl

@hookimpl
def initmem_register_metrics(register):
    raise RuntimeError("boom")
""",
    )
    with pytest.warns(PluginLoadWarning, match="RuntimeError: boom"):
        registry = load_registry()
    assert "weight-norms" in registry.names("metric")


def test_strict_mode_turns_failures_into_errors(install_fake_plugin, monkeypatch):
    install_fake_plugin("brokenplug", "raise ImportError('no')\n")
    with pytest.raises(PluginLoadError, match="brokenplug"):
        load_registry(strict=True)
    monkeypatch.setenv("INITMEM_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError):
        load_registry()


def test_allow_list(install_fake_plugin, monkeypatch):
    install_fake_plugin("fancyplug", GOOD_PLUGIN)
    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "")
    assert "fancy" not in load_registry().names("optimizer")
    assert "sgd" in load_registry().names("optimizer")  # built-ins always load
    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "someotherplug")
    assert "fancy" not in load_registry().names("optimizer")
    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "someotherplug, fancyplug")
    assert "fancy" in load_registry().names("optimizer")


def test_same_name_twice_is_an_error_naming_both_providers():
    registry = load_registry(entry_points=False, extra_plugins=[("clash", ClashingSgd())])
    with pytest.raises(DuplicateComponentError) as error:
        registry.lookup("optimizer", "sgd")
    message = str(error.value)
    assert "plugin 'optimizers' (initmem" in message and "plugin 'clash'" in message
    assert registry.lookup("optimizer", "adam")  # other names keep working
    with pytest.raises(DuplicateComponentError):
        load_registry(entry_points=False, extra_plugins=[("clash", ClashingSgd())], strict=True)


# -- plugins that exit ------------------------------------------------------------------------


# Plugin names are unique to this file: an imported module stays in sys.modules for later tests.
@pytest.mark.parametrize(
    "plugin, source, reason",
    [
        ("exitatimportplug", "import sys\nsys.exit(3)\n", "SystemExit: 3"),
        ("baseexcplug", "class Odd(BaseException):\n    pass\n\nraise Odd('odd')\n", "Odd: odd"),
        (
            "exitinhookplug",
            "import sys\nfrom initmem_core import hookimpl\n\n@hookimpl\n"
            "def initmem_register_optimizers(register):\n    sys.exit(4)\n",
            "SystemExit: 4",
        ),
    ],
)
def test_a_plugin_that_exits_is_skipped_with_one_line(install_fake_plugin, plugin, source, reason):
    install_fake_plugin(plugin, source)
    set_registry(None)
    listing = runner.invoke(app, ["plugins"])
    assert listing.exit_code == 0, listing.output
    warnings = [line for line in listing.stderr.splitlines() if plugin in line]
    assert len(warnings) == 1 and warnings[0].startswith("Warning:") and reason in warnings[0]
    assert "resnet20" in listing.stdout
    set_registry(None)
    bad = runner.invoke(app, ["run", "--sigma", "0", "--no-tracking"])  # the registry loads, then validation
    assert bad.exit_code == 2 and "--sigma must be greater than 0" in bad.stderr

    set_registry(None)
    strict = runner.invoke(app, ["--strict-plugins", "plugins"])
    assert strict.exit_code == 2 and reason in strict.stderr and len(strict.stderr.strip().splitlines()) == 1
    set_registry(None)
