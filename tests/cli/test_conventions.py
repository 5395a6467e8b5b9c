"""The conventions a researcher expects: every imported package declared, MLflow's source
tags and the environment on every run, system metrics on request, each split a dataset input,
``--json`` for scripts and the environment variables named in ``--help``."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core.tracking.provenance import command_source, requirements_text, source_tags
from initmem_core.training.environment import kept_variables
from tests.support import ROOT
from tests.support.cli_processes import SMALL, TINY_RUN_ARGS, TINY_SWEEP_ARGS

runner = CliRunner(env={"COLUMNS": "200"})
#: Imported where only an optional feature runs, and declared in that extra (or pytest's plugin).
OPTIONAL = {"ray": "distributed", "submitit": "distributed", "pytest": None}


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=folder,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture
def repository(tmp_path) -> tuple[Path, str]:
    """A git repository with one commit (the user's experiment code): its folder and commit."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    folder = tmp_path / "experiment"
    folder.mkdir()
    _git(folder, "init", "-q")
    (folder / "train.py").write_text("# the user's code\n")
    _git(folder, "add", "train.py")
    _git(folder, "commit", "-q", "-m", "first")
    return folder, _git(folder, "rev-parse", "HEAD")


# -- packaging -----------------------------------------------------------------------------------


def _third_party_imports() -> set[str]:
    """The top-level names of every package initmem_core, plugins/ and cli/ import, lazily or not."""
    names = set()
    for folder in ("initmem_core", "plugins", "cli"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    ours = {"initmem_core", "initmem_plugins", "initmem_cli"}
    return {name for name in names - ours if name not in sys.stdlib_module_names and name != "__future__"}


def test_every_package_initmem_imports_is_a_declared_dependency():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {canonicalize_name(Requirement(text).name) for text in project["dependencies"]}
    extras = {
        extra: {canonicalize_name(Requirement(text).name) for text in texts}
        for extra, texts in project["optional-dependencies"].items()
    }
    providers = metadata.packages_distributions()
    missing = []
    for name in sorted(_third_party_imports()):
        distributions = {canonicalize_name(d) for d in providers.get(name, [name])}
        if name in OPTIONAL:
            extra = OPTIONAL[name]
            assert extra is None or distributions & extras[extra], f"{name} is not in the {extra} extra"
            continue
        if not distributions & declared:
            missing.append(f"{name} (from {', '.join(sorted(distributions))})")
    assert not missing, f"imported but not in [project].dependencies: {missing}"
    assert "scipy" in declared and "psutil" in declared


def test_py_typed_and_gpu_checks_figures_are_package_data_read_through_the_package():
    import tomllib

    from initmem_core.sweep import cost

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = project["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["initmem_core"] and (ROOT / "initmem_core" / "py.typed").is_file()
    assert "gpu_check.json" in data["initmem_core.sweep"]
    # Beside the module, where an installed wheel has it too: never a path into the repository's docs/.
    assert Path(str(cost.GPU_FIGURES)).parent == Path(cost.__file__).parent
    assert project["project"]["license"] == "MIT" and (ROOT / "LICENSE").is_file()


# -- MLflow's source tags and the environment ----------------------------------------------------


def test_the_source_name_is_the_command_or_the_script():
    assert command_source(["/venv/bin/initmem", "--strict-plugins", "sweep", "--dry-run"]) == "initmem sweep"
    assert command_source(["/venv/bin/initmem", "run"]) == "initmem run"
    assert command_source(["experiments/train.py", "--lr", "1"]) == "experiments/train.py"  # as MLflow tags it
    assert command_source([""]) == command_source([]) == "<console>"


def test_source_tags_name_the_commit_of_the_repository_the_command_runs_in(repository, tmp_path):
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_SOURCE_NAME, MLFLOW_SOURCE_TYPE, MLFLOW_USER

    folder, commit = repository
    (folder / "sub").mkdir()
    tags = source_tags("initmem run", folder / "sub")
    assert tags[MLFLOW_GIT_COMMIT] == commit and tags[MLFLOW_SOURCE_NAME] == "initmem run"
    assert tags[MLFLOW_SOURCE_TYPE] == "LOCAL" and tags[MLFLOW_USER]
    assert tags["initmem.version"] == metadata.version("initmem")
    elsewhere = tmp_path / "not-a-repository"
    elsewhere.mkdir()
    assert MLFLOW_GIT_COMMIT not in source_tags("initmem run", elsewhere)


def test_a_run_in_a_repository_carries_its_commit_the_environment_and_every_split(
    repository, tracking_uri, monkeypatch
):
    from mlflow.tracking import MlflowClient
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

    folder, commit = repository
    monkeypatch.chdir(folder)
    monkeypatch.setenv("INITMEM_LAB", "north")
    monkeypatch.setenv("INITMEM_API_TOKEN", "s3cret")  # never written anywhere
    result = initmem_core.run(tracking_uri=tracking_uri, helper_process=False, checkpoint_every=0, **SMALL)
    client = MlflowClient(tracking_uri)
    run = client.get_run(result.run_id)
    assert run.data.tags[MLFLOW_GIT_COMMIT] == commit
    assert sorted(a.path for a in client.list_artifacts(result.run_id, "environment")) == [
        "environment/requirements.txt",
        "environment/system.json",
    ]
    system = json.loads(Path(client.download_artifacts(result.run_id, "environment/system.json")).read_text())
    assert system["torch"] == __import__("torch").__version__ and system["python"] == sys.version.split()[0]
    assert {"cuda", "cudnn", "gpu_count", "cpu_model", "os"} <= set(system)
    assert system["environment_variables"].get("INITMEM_LAB") == "north"
    assert "s3cret" not in json.dumps(system)
    requirements = Path(client.download_artifacts(result.run_id, "environment/requirements.txt")).read_text()
    assert f"torch=={metadata.version('torch')}\n" in requirements and requirements == requirements_text()
    contexts = {i.tags[0].value: i.dataset.digest for i in run.inputs.dataset_inputs}
    assert sorted(contexts) == ["testing", "training", "validation"] and len(set(contexts.values())) == 3


def test_no_variable_named_like_a_secret_is_kept():
    kept = kept_variables(
        {"INITMEM_LOAD_PLUGINS": "a", "INITMEM_TOKEN": "x", "CUDA_VISIBLE_DEVICES": "0", "HOME": "/root"}
    )
    assert kept == {"CUDA_VISIBLE_DEVICES": "0", "INITMEM_LOAD_PLUGINS": "a"}


def test_system_metrics_are_recorded_on_the_run_while_it_runs(tracking_uri, monkeypatch):
    from mlflow.tracking import MlflowClient

    from initmem_core.tracking.tracker import MlflowTracker

    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")  # MLflow's own knob
    tracker = MlflowTracker(tracking_uri, system_metrics=True)
    run_id = tracker.start_run("watched", {}, {})
    time.sleep(1.0)
    tracker.end_run()
    metrics = MlflowClient(tracking_uri).get_run(run_id).data.metrics
    assert "system/cpu_utilization_percentage" in metrics and "system/system_memory_usage_megabytes" in metrics


def test_system_metrics_need_tracking():
    result = runner.invoke(app, ["run", "--no-tracking", "--system-metrics", *TINY_RUN_ARGS])
    assert result.exit_code == 2 and "needs tracking" in result.output and "Traceback" not in result.output


# -- output for scripts --------------------------------------------------------------------------


def test_sweep_dry_run_json_is_one_document_with_every_cell_and_the_estimates():
    result = runner.invoke(
        app, ["sweep", "--sigma", "0.5,1,2", "--opt", "sgd,adam", *TINY_SWEEP_ARGS, "--dry-run", "--json"]
    )
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert len(answer["cells"]) == 6 and len(answer["groups"]) == 2
    assert {cell["sigma"] for cell in answer["cells"]} == {0.5, 1.0, 2.0}
    assert all(cell["epochs"] == 1 and "clock_sgd" in cell["clocks"] for cell in answer["cells"])
    assert answer["estimate"]["seconds_here"] > 0 and answer["disk_bytes"]["peak"] > 0
    assert "sweep " in result.stderr  # the lines for people


def test_presets_json_lists_every_preset():
    from initmem_core.sweep.presets import preset_names

    result = runner.invoke(app, ["presets", "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert [p["name"] for p in answer] == preset_names()
    assert next(p for p in answer if p["name"] == "paper-resnet9")["cells"] == 7 * 5 * 6


def test_help_names_the_environment_variables_initmem_reads():
    for command in ([], ["run"], ["sweep"]):
        text = runner.invoke(app, [*command, "--help"]).output
        for name in ("MLFLOW_TRACKING_URI", "INITMEM_LOAD_PLUGINS", "INITMEM_STRICT_PLUGINS", "MLFLOW_TRACKING_TOKEN"):
            assert name in text, (command, name)


@pytest.mark.slow(seconds=25)  # initmem itself, in a process of its own, in the user's repository
def test_run_json_in_a_repository_prints_the_run_whose_tags_name_the_commit(
    repository, tracking_uri, initmem_subprocess
):
    import os

    from mlflow.tracking import MlflowClient
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_SOURCE_NAME

    folder, commit = repository
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = initmem_subprocess(env, "run", *TINY_RUN_ARGS, "--tracking-uri", tracking_uri, "--json", cwd=folder)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)  # the whole of stdout: the table went to stderr
    assert answer["status"] == "FINISHED" and set(answer["summary"]) >= {"best_val_test_acc", "final_test_acc"}
    client = MlflowClient(tracking_uri)
    tags = client.get_run(answer["run_id"]).data.tags  # written by the tracking helper process
    assert tags[MLFLOW_GIT_COMMIT] == commit and tags[MLFLOW_SOURCE_NAME] == "initmem run"
    assert {a.path for a in client.list_artifacts(answer["run_id"], "environment")} == {
        "environment/requirements.txt",
        "environment/system.json",
    }


@pytest.mark.slow(seconds=30)  # a real two-cell sweep
def test_sweep_json_names_the_parent_its_cells_and_their_outcomes(repository, tracking_uri, monkeypatch):
    from mlflow.tracking import MlflowClient
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

    folder, commit = repository
    monkeypatch.chdir(folder)
    args = ["sweep", "--sigma", "0.5,2", *TINY_SWEEP_ARGS, "--threads", "1", "--name", "scripted"]
    result = runner.invoke(app, [*args, "--tracking-uri", tracking_uri, "--out", str(folder / "out"), "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["sweep"] == "scripted" and answer["outcomes"]["ran"] == 2 and answer["outcomes"]["failed"] == 0
    assert answer["report_folder"] == str(folder / "out")
    client = MlflowClient(tracking_uri)
    assert client.get_run(answer["parent_run_id"]).data.tags[MLFLOW_GIT_COMMIT] == commit
    for cell in answer["cells"]:
        assert cell["status"] == "FINISHED" and client.get_run(cell["run_id"]).data.tags[MLFLOW_GIT_COMMIT] == commit
        assert "environment/requirements.txt" in {a.path for a in client.list_artifacts(cell["run_id"], "environment")}
