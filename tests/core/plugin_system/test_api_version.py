"""Plugins declare the API range they support; an incompatible one is flagged, never loaded."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core.errors import PluginLoadError
from initmem_core.plugin_system.api_version import API_VERSION, supports
from initmem_core.plugin_system.loader import PluginLoadWarning, load_registry
from initmem_plugins.commands.scaffold import PluginNames, template_values

DECLARING_PLUGIN = """
from initmem_core import hookimpl

INITMEM_API = {required!r}

@hookimpl
def initmem_register_optimizers(register):
    register("{name}", "torch.optim:SGD", "an optimizer of a plugin that declares its API range")
"""


@pytest.mark.parametrize(
    ("required", "version", "expected"),
    [
        (">=1.0,<2", "1.0", True),
        (">=1.0,<2", "1.7", True),
        (">=1.0,<2", "2.0", False),
        (">=1.1", "1.0", False),
        ("==1", "1.0", True),  # 1 and 1.0 are the same version
        ("!=1.0", "1.0", False),
        ("~=1.2", "1.9", True),
        ("~=1.2", "1.1", False),
        ("~=1.2", "2.0", False),
        (" > 0.9 , <= 1.0 ", "1.0", True),
    ],
)
def test_supports(required, version, expected):
    assert supports(required, version) is expected


@pytest.mark.parametrize("required", ["", "1.0", ">=one", ">=1.0;<2", ">=1.0,", None, 2])
def test_a_malformed_range_is_a_value_error(required):
    with pytest.raises(ValueError, match="expected comma-separated comparisons"):
        supports(required)


def test_the_package_exposes_the_api_version():
    assert initmem_core.API_VERSION == API_VERSION


def test_generated_plugins_declare_a_range_that_includes_this_api():
    assert supports(template_values("optimizer", PluginNames("x"))["api_range"])


def test_incompatible_plugin_is_flagged_and_registers_nothing(install_fake_plugin):
    install_fake_plugin("futureplug", DECLARING_PLUGIN.format(required=">=2.0,<3", name="future-opt"), version="4.0")
    install_fake_plugin("todayplug", DECLARING_PLUGIN.format(required=f">={API_VERSION},<2", name="today-opt"))
    with pytest.warns(PluginLoadWarning, match="futureplug"):
        registry = load_registry()
    [failure] = registry.failures
    assert (failure.plugin, failure.package, failure.version) == ("futureplug", "futureplug", "4.0")
    assert failure.error.startswith(
        f"IncompatiblePluginError: needs initmem plugin API >=2.0,<3 but this initmem provides API {API_VERSION}"
    )
    assert "future-opt" not in registry.names("optimizer") and "futureplug" not in registry.plugins
    assert "today-opt" in registry.names("optimizer")


def test_malformed_declaration_is_flagged(install_fake_plugin):
    install_fake_plugin("sloppyplug", DECLARING_PLUGIN.format(required="version one", name="sloppy-opt"))
    with pytest.warns(PluginLoadWarning):
        registry = load_registry()
    assert "invalid INITMEM_API 'version one'" in registry.failures[0].error
    assert "sloppy-opt" not in registry.names("optimizer")


def test_incompatible_plugin_is_an_error_in_strict_mode(install_fake_plugin):
    install_fake_plugin("futureplug", DECLARING_PLUGIN.format(required=">=2.0", name="future-opt"))
    with pytest.raises(PluginLoadError, match="futureplug.*needs initmem plugin API >=2.0"):
        load_registry(strict=True)


def test_initmem_plugins_lists_the_incompatible_plugin_as_failed(install_fake_plugin):
    install_fake_plugin("futureplug", DECLARING_PLUGIN.format(required=">=2.0", name="future-opt"))
    result = CliRunner().invoke(app, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [f["plugin"] for f in report["failed"]] == ["futureplug"]
    assert "needs initmem plugin API >=2.0" in report["failed"][0]["error"]
    assert "future-opt" not in {c["name"] for c in report["components"]}
