"""The third-party example package installs with pip and works through the real entry points."""

from __future__ import annotations

import json

import pytest

from tests.support import ROOT
from tests.support.cli_processes import only_run

pytestmark = pytest.mark.slow  # pip-installs the example package and runs it

EXAMPLE = ROOT / "examples" / "initmem-fromage"


def test_installed_plugin_is_listed(installed_example, initmem_subprocess):
    result = initmem_subprocess(installed_example, "plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = [r for r in json.loads(result.stdout)["components"] if r["name"] == "fromage"]
    assert rows and rows[0]["kind"] == "optimizer" and rows[0]["package"] == "initmem-fromage"


def test_installed_plugin_trains_through_initmem_run(installed_example, initmem_subprocess, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = initmem_subprocess(
        installed_example,
        "run",
        "--opt",
        "fromage",
        "--lr",
        "0.01",
        "--epochs",
        "1",
        "--train-size",
        "128",
        "--tracking-uri",
        uri,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    run = only_run(uri)
    assert run.info.status == "FINISHED"
    assert run.data.params["opt"] == "fromage"
    assert run.data.params["provider.optimizer"].startswith("initmem-fromage ")


def test_allow_list_can_leave_the_plugin_out(installed_example, initmem_subprocess):
    env = dict(installed_example, INITMEM_LOAD_PLUGINS="")
    names = [r["name"] for r in json.loads(initmem_subprocess(env, "plugins", "--json").stdout)["components"]]
    assert "fromage" not in names and "sgd" in names


def test_the_example_package_own_tests_pass(installed_example, package_tests_subprocess):
    result = package_tests_subprocess(installed_example, EXAMPLE / "tests")
    assert result.returncode == 0, result.stdout + result.stderr
