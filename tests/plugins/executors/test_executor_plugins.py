"""Sweep executors as a plugin kind: the built-in local, ray and slurm are the plugin `executors`;
an outside package adds its own (`initmem_register_executors`), a broken one takes none of the
others down, and `--executor` is a registry look-up with one-line refusals."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.plugin_system.loader import load_registry
from tests.support.cli_processes import mlflow_client
from tests.support.fresh_imports import assert_imports_none_of

runner = CliRunner(env={"COLUMNS": "200"})

#: Runs each cell in the sweep's own process and writes what it ran into its folder (``<out>/inline``).
INLINE = """
from initmem_core import hookimpl
from initmem_core.sweep.executor import Executor, run_cell


class InlineExecutor(Executor):
    name = "inline"
    remote = False

    def __init__(self, folder, workers=1):
        self.folder = folder

    def run(self, cells, sweep):
        self.folder.mkdir(parents=True, exist_ok=True)
        for cell in cells:
            job = sweep.submit(cell)
            _, error = run_cell(cell.config, tracker=job.writer, registry=sweep.registry, resume=cell.resume)
            with open(self.folder / "ran.txt", "a") as ran:
                ran.write(f"{cell.config.sigma:g}\\n")
            sweep.close(job, error)


@hookimpl
def initmem_register_executors(register):
    register("inline", "inlineplug_mod:InlineExecutor", "each cell in the sweep's process, recorded")
    register("k8s", "inlineplug_mod:InlineExecutor", "needs what is not here",
             needs=("initmem_no_such_package",), install="pip install initmem-k8s")
"""

BROKEN = """
from initmem_core import hookimpl

@hookimpl
def initmem_register_executors(register):
    raise RuntimeError("the executor plugin is broken")
"""

SYNTHETIC_CELLS = [
    *("--data", "synthetic:1x8x8-c4-n64", "--arch", "resnet20", "--epochs", "1", "--train-size", "64"),
    *("--batch-size", "32", "--threads", "1", "--checkpoint-every", "0", "--sigma", "0.5,2"),
]


def test_the_builtin_executors_are_a_plugin_with_their_declarations():
    registry = load_registry(entry_points=False)
    assert registry.names("executor") == ["local", "ray", "slurm"]
    ray = registry.lookup("executor", "ray")[0]
    assert ray.provider.plugin == "executors" and isinstance(ray.factory, str)  # resolved only when built
    assert ray.info.needs == ("ray",) and "initmem[distributed]" in ray.info.install
    assert "workers" in registry.lookup("executor", "local")[0].info.options
    rows = json.loads(runner.invoke(app, ["plugins", "--json"]).stdout)["components"]
    listed = {row["name"]: row for row in rows if row["kind"] == "executor"}
    assert set(listed) == {"local", "ray", "slurm"} and listed["slurm"]["executor"]["needs"] == ["submitit"]


@pytest.mark.slow  # a sweep of two tiny cells and its report
def test_an_outside_package_runs_the_sweep_through_its_own_executor(install_fake_plugin, tracking_uri, tmp_path):
    install_fake_plugin("inlineplug", INLINE)
    install_fake_plugin("brokenexecplug", BROKEN)  # taken out alone: the others still load
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["sweep", *SYNTHETIC_CELLS, "--executor", "inline", "--name", "own", "--out", str(out)]
        + ["--tracking-uri", tracking_uri],
    )
    assert result.exit_code == 0, result.output
    assert "brokenexecplug" in result.stderr and "the executor plugin is broken" in result.stderr
    assert sorted((out / "inline" / "ran.txt").read_text().split()) == ["0.5", "2"]
    client = mlflow_client(tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("initmem").experiment_id])
    children = [run for run in runs if "mlflow.parentRunId" in run.data.tags]
    assert len(children) == 2 and {run.info.status for run in children} == {"FINISHED"}


def test_a_broken_executor_plugin_takes_none_of_the_others_down(install_fake_plugin):
    install_fake_plugin("brokenexecplug", BROKEN)
    install_fake_plugin("inlineplug", INLINE)
    with pytest.warns(UserWarning, match="the executor plugin is broken"):
        registry = load_registry()
    assert registry.names("executor") == ["inline", "k8s", "local", "ray", "slurm"]
    assert [failure.plugin for failure in registry.failures] == ["brokenexecplug"]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--executor", "k8s"],
            "--executor k8s needs initmem_no_such_package, which is not installed: pip install initmem-k8s",
        ),
        (["--executor", "inline", "--workers", "2"], "--workers is for --executor local, not inline"),
        (
            ["--executor", "inlin"],
            "--executor: no executor named 'inlin' is registered (did you mean 'inline'?); "
            "valid executors: inline, k8s, local, ray, slurm",
        ),
    ],
)
def test_an_outside_executor_is_refused_in_one_line_before_anything_runs(install_fake_plugin, args, message):
    install_fake_plugin("inlineplug", INLINE)
    result = runner.invoke(app, ["sweep", *SYNTHETIC_CELLS, *args, "--dry-run"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"Error: {message}" and "Traceback" not in result.output


def test_the_allow_list_can_leave_the_builtin_executors_out(monkeypatch):
    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "")
    assert load_registry().names("executor") == []
    result = runner.invoke(app, ["sweep", *SYNTHETIC_CELLS, "--dry-run"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip() == (
        "Error: --executor: no executor named 'local' is registered; "
        "valid executors: none (the plugin 'executors' has local, ray and slurm)"
    )
    monkeypatch.setenv("INITMEM_LOAD_PLUGINS", "executors")
    assert load_registry().names("executor") == ["local", "ray", "slurm"]


@pytest.mark.slow  # starts a process
def test_sweep_help_and_the_listing_import_no_executor_backend():
    for args in (["sweep", "--help"], ["plugins"], ["plugins", "--json"]):
        code = f"import sys; from initmem_cli.app import app\ntry: app({args!r})\nexcept SystemExit: pass\n"
        assert_imports_none_of(code, "torch", "mlflow", "ray", "submitit")
