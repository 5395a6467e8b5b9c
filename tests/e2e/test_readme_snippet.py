"""README's "From Python, with no CLI" block, run as a script exactly as written: with its two
spawned sweep workers it makes the runs it asks for once each (a run outside the main guard
would be trained again by every worker that imports the script)."""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

import pytest

from initmem_core.sweep.grid import plan_sweep
from initmem_core.vocabulary import PARENT_TAG, ROLE_TAG
from tests.support import ROOT
from tests.support.long_commands import run_command

# Skipped, not an error, where MLflow is not installed (the GPU machine has none).
MlflowClient = pytest.importorskip("mlflow").MlflowClient

pytestmark = pytest.mark.slow(seconds=90)  # a tracked run and a 4-cell sweep with 2 worker processes

README = ROOT / "README.md"


def readme_snippet() -> str:
    section = README.read_text().split("### From Python, with no CLI", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
    ]


def readme_snippet_as_a_script(folder: Path) -> list[str]:
    """The block as ``snippet.py``, run in an empty folder (its store, ./mlflow.db, is made there)
    without this shell's MLflow and initmem settings, as a reader would run it."""
    (folder / "snippet.py").write_text(readme_snippet())
    unset = [part for key in os.environ if key.startswith(("MLFLOW_", "INITMEM_")) for part in ("-u", key)]
    return ["env", *unset, sys.executable, "snippet.py"]


def test_the_readme_snippet_makes_each_run_it_asks_for_once(short_tmp):
    code = readme_snippet()
    tree = ast.parse(code)
    [sweep_call] = calls(tree, "run_sweep")
    assert {k.arg: ast.literal_eval(k.value) for k in sweep_call.keywords}.get("workers") == 2
    cells = len(plan_sweep(ast.literal_eval(sweep_call.args[0])).cells)
    single_runs = len(calls(tree, "run"))
    done = run_command(readme_snippet_as_a_script(short_tmp), short_tmp, timeout_s=600)
    uri = f"sqlite:///{short_tmp / 'mlflow.db'}"
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.strip().splitlines()
    assert len(printed) == 2 and printed[1].startswith("[("), done.stdout  # each print once

    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    parents = [r for r in runs if r.data.tags.get(ROLE_TAG) == "parent"]
    children = [r for r in runs if PARENT_TAG in r.data.tags]
    alone = [r for r in runs if r not in parents and r not in children]
    assert (len(alone), len(parents), len(children)) == (single_runs, 1, cells) == (1, 1, 4)
    assert {r.data.tags[PARENT_TAG] for r in children} == {parents[0].info.run_id}
    assert {r.info.status for r in runs} == {"FINISHED"}
