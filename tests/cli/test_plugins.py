"""`initmem plugins`, CLI start-up cost, and the CLI's one-line errors for plugin problems."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from tests.support.fresh_imports import assert_imports_none_of

runner = CliRunner()

FANCY = """
from initmem_core import hookimpl

@hookimpl
def initmem_register_optimizers(register):
    register("fancy", "torch.optim:SGD", "A fancy optimizer")
"""


def test_plugins_json_lists_every_component_with_its_provider():
    result = runner.invoke(app, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = {(row["kind"], row["name"]): row for row in report["components"]}
    assert rows[("optimizer", "muon")]["package"] == "initmem"
    assert rows[("architecture", "resnet56")]["plugin"] == "architectures"
    assert {"kind", "name", "description", "plugin", "package", "version"} == set(rows[("dataset", "digits")])
    assert report["failed"] == []


def test_plugins_table_shows_third_party_and_failed_plugins(install_fake_plugin):
    install_fake_plugin("fancyplug", FANCY, version="3.1")
    install_fake_plugin("brokenplug", "import no_such_dependency\n")
    result = runner.invoke(app, ["plugins"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "fancy" in result.stdout and "fancyplug (fancyplug 3.1)" in result.stdout
    assert "plugins that failed to load" in result.stdout and "no_such_dependency" in result.stdout


@pytest.mark.slow  # starts a process
def test_help_and_plugins_import_neither_torch_nor_mlflow():
    for args in (
        ["--help"],
        ["plugins"],
        ["run", "--help"],
        ["export", "--help"],
        ["report", "--help"],
        ["clean", "--help"],
        ["new-plugin", "--help"],
    ):  # the last two: the plugin `commands`
        code = f"import sys; from initmem_cli.app import app\ntry: app({args!r})\nexcept SystemExit: pass\n"
        assert_imports_none_of(code, "torch", "mlflow", "matplotlib")  # figures are plugins, by import string


def test_unknown_name_is_one_line_exit_2_and_tracks_nothing(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = runner.invoke(app, ["run", "--opt", "adma", "--tracking-uri", uri])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "Error: unknown optimizer 'adma' (did you mean 'adam'?); valid names: "
        + result.stderr.split("valid names: ")[1].strip()
    )
    listed = result.stderr.split("valid names: ")[1].strip().split(", ")
    assert listed == sorted(listed) and {"adam", "muon", "sgd"} <= set(listed)  # sorted, not by likeness
    assert "Traceback" not in result.output
    assert not (tmp_path / "mlflow.db").exists()


def test_a_model_name_that_only_a_family_can_build_suggests_the_family():
    """resnet18 is timm's (timm:resnet18), not a typo of the built-in resnet110; a typo of a plain
    name (no digit: not a model's) still suggests the close plain name."""
    result = runner.invoke(app, ["run", "--arch", "resnet18", "--no-tracking"])
    assert result.exit_code == 2 and "unknown architecture 'resnet18' (did you mean 'timm:resnet18'?)" in result.stderr
    result = runner.invoke(app, ["run", "--data", "mnst", "--no-tracking"])
    assert result.exit_code == 2 and "unknown dataset 'mnst' (did you mean 'mnist'?)" in result.stderr


def test_duplicate_name_is_one_line_exit_2(install_fake_plugin, tmp_path):
    install_fake_plugin(
        "clashplug",
        """
from initmem_core import hookimpl

@hookimpl
def initmem_register_optimizers(register):
    register("adam", "torch.optim:Adam", "another adam")
""",
    )
    result = runner.invoke(app, ["run", "--opt", "adam", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"])
    assert result.exit_code == 2
    assert "optimizer 'adam' is registered twice" in result.stderr and "clashplug" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_broken_plugin_warns_in_one_line_and_strict_mode_fails(install_fake_plugin):
    install_fake_plugin("brokenplug", "import no_such_dependency\n")
    result = runner.invoke(app, ["plugins", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["failed"][0]["plugin"] == "brokenplug"
    strict = runner.invoke(app, ["--strict-plugins", "plugins"])
    assert strict.exit_code == 2
    assert "brokenplug" in strict.stderr and "strict plugin loading is on" in strict.stderr
