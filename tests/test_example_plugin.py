"""The third-party example package installs with pip and works through the real entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "initmem-fromage"


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory) -> dict[str, str]:
    """pip-install the example into a private folder; return an environment that sees it."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(EXAMPLE)], check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")])))
    env.pop("INITMEM_LOAD_PLUGINS", None)
    return env


def initmem(env, *args, cwd=None):
    return subprocess.run([sys.executable, "-m", "initmem_cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True)


def test_installed_plugin_is_listed(installed_example):
    result = initmem(installed_example, "plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = [r for r in json.loads(result.stdout)["components"] if r["name"] == "fromage"]
    assert rows and rows[0]["kind"] == "optimizer" and rows[0]["package"] == "initmem-fromage"


def test_installed_plugin_trains_through_initmem_run(installed_example, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = initmem(installed_example, "run", "--opt", "fromage", "--lr", "0.01", "--epochs", "1",
                     "--train-size", "128", "--tracking-uri", uri, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("initmem").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["opt"] == "fromage"
    assert run.data.params["provider.optimizer"].startswith("initmem-fromage ")


def test_allow_list_can_leave_the_plugin_out(installed_example):
    env = dict(installed_example, INITMEM_LOAD_PLUGINS="")
    names = [r["name"] for r in json.loads(initmem(env, "plugins", "--json").stdout)["components"]]
    assert "fromage" not in names and "sgd" in names


def test_the_example_package_own_tests_pass(installed_example):
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
                            env=installed_example, capture_output=True, text=True, cwd=EXAMPLE)
    assert result.returncode == 0, result.stdout + result.stderr
