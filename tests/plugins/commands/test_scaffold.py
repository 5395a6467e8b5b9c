"""`initmem new-plugin`: a package for every kind that installs, lists, runs and passes its own tests."""

from __future__ import annotations

import ast
import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.kinds import BY_NAME
from initmem_plugins.commands.scaffold import SCAFFOLD_KINDS
from tests.support.cli_processes import history, only_run
from tests.support.fresh_imports import assert_imports_none_of

runner = CliRunner()

#: One generated plugin of every kind, named as a user might.
GENERATED = {
    "architecture": "tiny-mlp",
    "optimizer": "sign-sgd",
    "initializer": "uniform-fan-in",
    "regularizer": "l1",
    "metric": "weight-change",
    "dataset": "quadrants",
    "claim": "adam-forgets",
}


def new_plugin(*args: str):
    return runner.invoke(app, ["new-plugin", *args])


@pytest.mark.parametrize("kind", SCAFFOLD_KINDS)
def test_writes_a_complete_package_for_every_kind(kind, tmp_path):
    folder = tmp_path / "pkg"
    result = new_plugin(kind, "my-thing", "--dir", str(folder))
    assert result.exit_code == 0, result.output
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert files == sorted(
        [
            "README.md",
            "pyproject.toml",
            "src/initmem_my_thing/__init__.py",
            "src/initmem_my_thing/plugin.py",
            f"src/initmem_my_thing/{kind}.py",
            "tests/test_initmem_my_thing.py",
        ]
    )
    project = tomllib.loads((folder / "pyproject.toml").read_text())
    assert project["project"]["name"] == "initmem-my-thing"
    assert project["project"]["entry-points"]["initmem"] == {"my-thing": "initmem_my_thing.plugin"}
    for path in folder.rglob("*.py"):
        ast.parse(path.read_text(), str(path))
    plugin = (folder / "src/initmem_my_thing/plugin.py").read_text()
    assert f"def {BY_NAME[kind].hook}(register):" in plugin
    assert f'"initmem_my_thing.{kind}:' in plugin and "import torch" not in plugin


def test_default_folder_is_initmem_dash_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert new_plugin("metric", "flatness").exit_code == 0
    assert (tmp_path / "initmem-flatness" / "src" / "initmem_flatness" / "metric.py").is_file()


def test_refuses_to_overwrite_an_existing_folder(tmp_path):
    folder = tmp_path / "taken"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    result = new_plugin("optimizer", "lion", "--dir", str(folder))
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"Error: {folder} already exists; choose a new folder with --dir (nothing was overwritten)"
    )
    assert [p.name for p in folder.iterdir()] == ["keep.txt"] and (folder / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("name", ["Lion", "1lion", "lion--v2", "lion-", "lion_v2", "timm:lion", "li on"])
def test_rejects_names_that_are_not_component_names(name, tmp_path):
    result = new_plugin("optimizer", name, "--dir", str(tmp_path / "pkg"))
    assert result.exit_code == 2
    assert f"Error: '{name}' is not a valid component name: use lowercase letters" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "pkg").exists()


@pytest.mark.parametrize("name", ["core", "plugins", "cli"])
def test_rejects_names_whose_package_would_shadow_initmem(name, tmp_path):
    result = new_plugin("metric", name, "--dir", str(tmp_path / "pkg"))
    assert result.exit_code == 2 and f"initmem_{name}, which is initmem's own" in result.stderr


def test_rejects_a_name_already_registered_for_that_kind(tmp_path):
    result = new_plugin("optimizer", "sgd", "--dir", str(tmp_path / "pkg"))
    assert result.exit_code == 2
    assert "optimizer 'sgd' already exists, from plugin 'optimizers' (initmem" in result.stderr
    assert new_plugin("metric", "sgd", "--dir", str(tmp_path / "pkg")).exit_code == 0  # other kinds may use it


def test_unknown_kind_lists_the_valid_ones_closest_first(tmp_path):
    result = new_plugin("optimiser", "lion", "--dir", str(tmp_path / "pkg"))
    assert result.exit_code == 2
    assert result.stderr.strip().startswith(
        "Error: unknown kind 'optimiser' (did you mean 'optimizer'?); valid kinds: architecture, "
    )


@pytest.mark.slow  # starts a process
def test_new_plugin_imports_no_torch(tmp_path):
    code = (
        "import sys; from initmem_cli.app import app\n"
        f"try: app(['new-plugin', 'optimizer', 'lion', '--dir', {str(tmp_path / 'pkg')!r}])\n"
        "except SystemExit as exit: assert not exit.code, exit.code\n"
    )
    assert_imports_none_of(code, "torch")


# -- end to end: generate all six, pip-install them, use them --------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory, pip_install_isolated) -> tuple[dict[str, Path], dict[str, str]]:
    """Every kind generated into a temp folder and pip-installed: (folders by kind, environment)."""
    root = tmp_path_factory.mktemp("generated")
    folders = {}
    for kind, name in GENERATED.items():
        folders[kind] = root / f"initmem-{name}"
        result = new_plugin(kind, name, "--dir", str(folders[kind]))
        assert result.exit_code == 0, result.output
    return folders, pip_install_isolated(*folders.values())


@pytest.mark.slow  # pip-installs the generated packages
def test_initmem_plugins_lists_every_generated_plugin(generated, initmem_subprocess):
    _, env = generated
    result = initmem_subprocess(env, "plugins", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["failed"] == [] and report["conflicts"] == []
    listed = {(row["kind"], row["name"]): row["package"] for row in report["components"]}
    for kind, name in GENERATED.items():
        assert listed.get((kind, name)) == f"initmem-{name}"
    [optimizer] = [row for row in report["components"] if row["name"] == GENERATED["optimizer"]]
    assert optimizer["clock"] == "lr" and optimizer["clock_declared"] and optimizer["family"] == "adaptive"
    assert optimizer["default_lr"] == 0.001 and optimizer["lr_declared"]


@pytest.mark.slow(seconds=120)  # pip-installs the generated packages, then a 12-cell sweep
def test_a_generated_optimizer_enters_the_sgd_against_adaptive_claim(
    generated, initmem_subprocess, tracking_uri, tmp_path
):
    _, env = generated
    opt = GENERATED["optimizer"]
    sweep = initmem_subprocess(
        env,
        "sweep",
        *("--opt", f"sgd,adam,{opt}", "--sigma", "0.5,2", "--seed", "0,1", "--epochs", "3"),
        *("--train-size", "256", "--batch-size", "32", "--eval-size", "100", "--threads", "1", "--workers", "2"),
        *("--name", "scaffold", "--tracking-uri", tracking_uri, "--out", str(tmp_path / "out")),
        cwd=tmp_path,
    )
    assert sweep.returncode == 0, sweep.stderr
    report = initmem_subprocess(env, "report", "scaffold", "--format", "json", "--tracking-uri", tracking_uri)
    assert report.returncode == 0, report.stderr
    [claim] = [f for f in json.loads(report.stdout)["findings"] if f["name"] == "sgd_remembers_more_than_adaptive"]
    compared = json.dumps(claim, ensure_ascii=False)
    assert claim["verdict"] != "not evaluated", compared
    # classed adaptive by its declared clock: compared with SGD beside Adam
    labels = [q["label"] for q in claim["quantities"]]
    assert any(f"− {opt} lr=" in label for label in labels), compared  # labels carry the rate and batch
    assert any("− adam lr=" in label for label in labels), compared


@pytest.mark.slow  # pip-installs the generated packages
def test_one_initmem_run_uses_a_generated_plugin_of_every_kind(generated, initmem_subprocess, tracking_uri, tmp_path):
    _, env = generated
    g = GENERATED
    result = initmem_subprocess(
        env,
        "run",
        "--arch",
        g["architecture"],
        "--opt",
        g["optimizer"],
        "--init",
        g["initializer"],
        "--reg",
        g["regularizer"],
        "--l2",
        "0.001",
        "--metric",
        g["metric"],
        "--data",
        g["dataset"],
        "--epochs",
        "1",
        "--train-size",
        "64",
        "--batch-size",
        "32",
        "--threads",
        "1",
        "--tracking-uri",
        tracking_uri,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    run = only_run(tracking_uri)
    assert run.info.status == "FINISHED"
    for kind in ("architecture", "optimizer", "initializer", "regularizer", "dataset"):
        assert run.data.params[f"provider.{kind}"] == f"initmem-{g[kind]} 0.1.0"
    assert run.data.params["data_train_size"] == "64"
    change = dict(history(tracking_uri, run.info.run_id, "weight_change"))
    assert change[0] == 0 and change[1] > 0  # the metric plugin saw the weights move
    assert run.data.metrics["reg_penalty"] > 0


@pytest.mark.slow  # pip-installs the generated packages
def test_every_generated_package_passes_its_own_tests(generated, package_tests_subprocess):
    folders, env = generated
    result = package_tests_subprocess(env, *folders.values())
    assert result.returncode == 0, result.stdout + result.stderr
    written = sum(
        path.read_text().count("\ndef test_")
        for folder in folders.values()
        for path in (folder / "tests").glob("test_*.py")
    )
    assert f"{written} passed" in result.stdout  # every package's tests ran, none skipped
