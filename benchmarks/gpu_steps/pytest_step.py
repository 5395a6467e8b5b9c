"""(a) ``tests``: ``pytest -m gpu tests``, each test's outcome recorded by a small pytest plugin.

The ``gpu``-marked tests need a real CUDA GPU: on a GPU machine none may skip; in a dry run they
all skip. Tests that need MLflow skip where it cannot be imported (the GPU machine has none), so
the selection collects and runs there as it does here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from typing import Any

from benchmarks.gpu_steps.common import ROOT, Context, last_lines

PYTEST_PLUGIN = """\
import json
import os

import pytest

SELECTED, ROWS = [], []


@pytest.hookimpl(trylast=True)  # after -m has deselected
def pytest_collection_modifyitems(config, items):
    SELECTED.extend({"test": item.nodeid, "gpu": item.get_closest_marker("gpu") is not None} for item in items)


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        ROWS.append({"test": report.nodeid, "outcome": report.outcome})


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["GPU_CHECK_OUTCOMES"], "w") as handle:
        json.dump({"selected": SELECTED, "outcomes": ROWS}, handle)
"""


def installed() -> bool:
    try:
        metadata.distribution("initmem")
        return True
    except metadata.PackageNotFoundError:
        return False


def run(ctx: Context) -> dict[str, Any]:
    plugin_dir = ctx.path("pytest-plugin")
    plugin_dir.mkdir()
    report = plugin_dir / "outcomes.json"
    (plugin_dir / "gpu_check_outcomes.py").write_text(PYTEST_PLUGIN)
    env = ctx.environment()
    env["PYTHONPATH"] = os.pathsep.join([str(plugin_dir), env["PYTHONPATH"]])
    env["GPU_CHECK_OUTCOMES"] = str(report)
    # Run from the tree (not pip-installed): initmem's pytest plugin is not an entry point then.
    plugins = [] if installed() else ["-p", "initmem_core.testing"]
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "gpu_check_outcomes",
        "-p",
        "no:cacheprovider",
        *plugins,
        "-m",
        "gpu",
        "tests",
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=max(1.0, ctx.left_s() - 5), env=env, cwd=ROOT
        )
        exited, tail = done.returncode, last_lines(done.stdout, 3)
    except subprocess.TimeoutExpired as error:
        stdout = error.stdout.decode() if isinstance(error.stdout, bytes) else error.stdout
        exited, tail = None, f"pytest outlasted the step's deadline: {last_lines(stdout, 3)}"
    found = json.loads(report.read_text()) if report.exists() else {"selected": [], "outcomes": []}
    calls: dict[str, str] = {}
    for row in found["outcomes"]:  # one outcome per test: a failed setup or teardown counts as failed
        if row["outcome"] == "failed" or row["test"] not in calls:
            calls[row["test"]] = row["outcome"]
    outcome = {kind: sorted(t for t, o in calls.items() if o == kind) for kind in ("passed", "failed", "skipped")}
    gpu_marked = sorted(row["test"] for row in found["selected"] if row["gpu"])
    gpu_skipped = sorted(set(gpu_marked) & set(outcome["skipped"]))
    problems = []
    if exited != 0 or outcome["failed"]:
        problems.append(f"pytest exited {exited}; failed: {', '.join(outcome['failed']) or tail}")
    if not gpu_marked:
        problems.append("no gpu-marked test was selected")
    if not ctx.dry and gpu_skipped:
        problems.append(f"gpu-marked tests skipped on a GPU machine: {', '.join(gpu_skipped)}")
    ran = len([t for t in gpu_marked if t in outcome["passed"] or t in outcome["failed"]])
    detail = (
        f"`pytest -m gpu tests`: {len(gpu_marked)} gpu-marked tests, {ran} ran "
        f"({len(outcome['passed'])} passed, {len(outcome['failed'])} failed), {len(gpu_skipped)} skipped"
        + (": no CUDA in a dry run" if ctx.dry and gpu_skipped else "")
    )
    return {
        "passed": not problems,
        "detail": detail,
        "problems": problems,
        "outcomes": outcome,
        "gpu_marked": gpu_marked,
    }
