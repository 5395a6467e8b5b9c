"""benchmarks/gpu_check.py, the one prepared GPU check: its dry run passes every step on the CPU
with MLflow unimportable (as on the GPU machine), so the script cannot rot; ``pytest -m gpu``
collects and runs there; a step that outlasts its deadline is stopped and reported while the
others run; and only a complete run writes a docs page, and only its own section of it.

Only the plumbing is tested: the dry run's figures are toy-size CPU timings and nothing here
compares them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_check
from benchmarks.gpu_steps import CHECKS, NAMES
from benchmarks.gpu_steps.common import DRY, FULL
from benchmarks.gpu_steps.report import BEGIN, END, write_section
from tests.blocked_imports import command_without, environment_without
from tests.long_commands import run_command

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
DOCS = ROOT / "docs" / "PERFORMANCE.md"
#: What the GPU machine lacks of what the tests and their extras install (/work/.library/device/KINDS.md).
GPU_MACHINE_LACKS = ("mlflow", "ray", "submitit", "psycopg2")


def between_markers(text: str) -> str:
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)]


def outside_markers(text: str) -> str:
    return text[: text.index(BEGIN)] + text[text.index(END) :]


def device_command() -> str:
    """The one command docs/PERFORMANCE.md gives for the GPU machine."""
    text = DOCS.read_text()
    block = text.split("<!-- device command -->", 1)[1]
    return re.search(r"```bash\n(.*?)\n```", block, flags=re.S).group(1)


def test_gpu_section_is_replaced_between_its_markers_and_nowhere_else(tmp_path):
    page = tmp_path / "PERFORMANCE.md"
    page.write_text(f"# Performance\n\nbefore\n\n## GPU\n\n{BEGIN}\nold figures\n{END}\n\nafter\n")
    write_section(page, "| new | table |")
    first = page.read_text()
    assert "old figures" not in first and between_markers(first).strip() == "| new | table |"
    assert first.startswith("# Performance\n\nbefore\n\n## GPU\n\n") and first.endswith(f"{END}\n\nafter\n")
    write_section(page, "| new | table |")
    assert page.read_text() == first  # a rerun replaces its section; nothing accumulates

    bare = tmp_path / "other.md"
    bare.write_text("# Performance\n\ntext\n")
    write_section(bare, "figures")
    text = bare.read_text()
    assert text.startswith("# Performance\n\ntext\n\n## GPU\n") and between_markers(text).strip() == "figures"


def test_gpu_section_of_the_docs_holds_the_markers_once_and_says_what_was_measured():
    text = DOCS.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert text.index("\n## GPU\n") < text.index(BEGIN)
    inside = between_markers(text)
    assert "Not yet measured on a GPU" in inside or "Measured by `python -m benchmarks.gpu_check` on" in inside
    assert "python -m benchmarks.gpu_check --dry-run" in text


def test_only_a_complete_run_writes_a_docs_page_and_every_run_writes_its_samples(tmp_path):
    docs = tmp_path / "PERFORMANCE.md"
    shutil.copy(DOCS, docs)
    out = tmp_path / "out"
    out.mkdir()
    results = {"complete": False, "steps": {"tests": {"passed": False}}}
    written = gpu_check.write_outputs(results, "| half |", json_path=None, out=out, docs=docs, dry=False)
    assert written is None and sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "gpu_check.md"]
    assert json.loads((out / "gpu_check.json").read_text()) == results
    assert gpu_check.write_outputs(results, "| half |", json_path=None, out=None, docs=docs, dry=False) is None
    assert docs.read_bytes() == DOCS.read_bytes()  # an incomplete run changes no page

    results["complete"] = True
    written = gpu_check.write_outputs(results, "| whole |", json_path=None, out=out, docs=docs, dry=False)
    assert written == out / "PERFORMANCE.md" and docs.read_bytes() == DOCS.read_bytes()  # --out: a copy
    page = written.read_text()
    assert between_markers(page).strip() == "| whole |" and outside_markers(page) == outside_markers(DOCS.read_text())
    assert gpu_check.write_outputs(results, "| whole |", json_path=None, out=None, docs=docs, dry=False) == docs
    assert between_markers(docs.read_text()).strip() == "| whole |"


def test_the_steps_deadlines_fit_in_seven_minutes():
    for plan in (FULL, DRY):
        assert set(plan.step_s) == set(NAMES)
        side_by_side = max(plan.step_s[s] for s in CHECKS)
        one_at_a_time = sum(plan.step_s[s] for s in NAMES if s not in CHECKS)
        assert side_by_side + one_at_a_time <= plan.budget_s
    assert FULL.budget_s <= 7 * 60


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed process whose parent died waits there for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


class FakeSteps(gpu_check.Steps):
    """Steps whose processes are small scripts: ``slow`` saves a partial result, starts a child and
    sleeps past its deadline; ``quick`` saves its result and ends."""

    def command(self, step, context_path):
        context = json.loads(Path(context_path).read_text())
        script = f"""
import json, subprocess, sys, time
path = {context["result_path"]!r}
if {step!r} == "tests":
    json.dump({{"passed": True, "detail": "half-way", "problems": []}}, open(path, "w"))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    open(path + ".child", "w").write(str(child.pid))
    time.sleep(60)
json.dump({{"passed": True, "detail": "done", "problems": []}}, open(path, "w"))
"""
        return [sys.executable, "-c", script]


def test_a_step_past_its_deadline_is_stopped_with_what_it_started_and_the_others_still_run(tmp_path):
    plan = gpu_check.Plan(**{**DRY.__dict__, "step_s": {**DRY.step_s, "tests": 1.0, "determinism": 30.0}})
    logs = tmp_path / "logs"
    logs.mkdir()
    steps = FakeSteps(plan, tmp_path, tmp_path, True, time.time() + 60, [], logs)
    began = time.time()
    steps.start("tests")
    steps.start("determinism")
    slow, quick = steps.finish("tests"), steps.finish("determinism")
    assert time.time() - began < 20
    assert not slow["passed"] and not slow["finished"] and "outlasted its deadline of 1 s" in slow["problems"][0]
    assert slow["detail"] == "half-way"  # what it had saved is kept
    child = int((tmp_path / "result-tests.json.child").read_text())
    time.sleep(0.2)
    assert not running(child)  # its child was stopped with it
    assert quick["passed"] and quick["finished"] and quick["detail"] == "done"


def test_gpu_check_refuses_unknown_steps_in_one_line(capsys):
    with pytest.raises(SystemExit) as ended:
        gpu_check.main(["--dry-run", "--steps", "tests,speeed"])
    assert ended.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "speeed" in error and "lockstep" in error


@pytest.mark.slow  # starts the script, which imports torch: 2-6 s
@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the check would run for real")
def test_the_device_command_runs_from_the_tree_and_without_a_gpu_says_so_in_one_line(tmp_path):
    command = device_command()
    assert len(command) <= 2000 and '--out "$OUT"' in command and "-m benchmarks.gpu_check" in command
    out = tmp_path / "out"
    out.mkdir()
    env = environment_without(tmp_path / "blocked", *GPU_MACHINE_LACKS)
    done = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env={**env, "OUT": str(out)}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stdout + done.stderr
    console = (out / "console.txt").read_text()
    assert console.startswith("Error: no CUDA GPU here") and console.count("\n") == 1 and "Traceback" not in console
    assert len(list(out.iterdir())) <= 8


def test_the_blocked_environment_really_lacks_mlflow(tmp_path):
    env = environment_without(tmp_path, "mlflow")
    done = subprocess.run([sys.executable, "-c", "import mlflow.tracking"], env=env, capture_output=True, text=True)
    assert done.returncode == 1 and "ModuleNotFoundError: No module named 'mlflow" in done.stderr


def nested_pytest(folder: Path, *args: str) -> list[str]:
    """``python -m pytest -q ARGS`` with its temporary files under ``folder`` and no cache written."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={folder / 't'}", *args]


def gpu_marked_without_mlflow(folder: Path) -> list[str]:
    return command_without(
        folder / "blocked", GPU_MACHINE_LACKS, nested_pytest(folder, "-m", "gpu", str(ROOT / "tests"), "-rs")
    )


@pytest.mark.slow(seconds=60)  # collects the whole suite
def test_gpu_marked_tests_collect_and_run_without_mlflow(short_tmp):
    done = run_command(gpu_marked_without_mlflow(short_tmp), short_tmp)
    assert done.returncode == 0, done.stdout[-3000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert "error" not in summary and "failed" not in summary
    if not torch.cuda.is_available():
        assert re.search(r"\d+ skipped", summary) and "passed" not in summary


def dry_run_without_mlflow(folder: Path) -> list[str]:
    """The script at toy size on the CPU with MLflow unimportable, writing into a copy of docs/PERFORMANCE.md."""
    shutil.copy(DOCS, folder / "PERFORMANCE.md")
    argv = [sys.executable, str(SCRIPT), "--dry-run", "--docs", str(folder / "PERFORMANCE.md"), "--out", "out"]
    return command_without(folder / "blocked", GPU_MACHINE_LACKS, argv)


@pytest.mark.slow(seconds=240)  # the script and its dozen processes: minutes on two cores
def test_gpu_check_dry_run_passes_every_step_without_mlflow(short_tmp):
    done, folder = run_command(dry_run_without_mlflow(short_tmp), short_tmp), short_tmp
    docs, out = folder / "PERFORMANCE.md", folder / "out"
    real_docs = DOCS.read_bytes()
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "gpu_check.json").read_text())
    steps = results["steps"]
    assert list(steps) == list(NAMES) and results["complete"]
    assert all(step["passed"] and step["finished"] for step in steps.values()), {
        name: s.get("problems") for name, s in steps.items()
    }
    assert sorted(p.name for p in out.iterdir()) == [
        "PERFORMANCE.md",
        "gpu_check.json",
        "gpu_check.log",
        "gpu_check.md",
    ]

    # What each step found, not only that it ran.
    tests = steps["tests"]  # the gpu-marked tests, collected with MLflow missing: they skip here
    assert tests["gpu_marked"] and set(tests["gpu_marked"]) == set(tests["outcomes"]["skipped"])
    assert "stopped in epoch 2 at step 7" in steps["divergence"]["detail"]
    assert "bit-identical" in steps["determinism"]["detail"] and "identical" in steps["resume"]["detail"]
    measured = [row for row in steps["speed"]["rows"] if row["status"] == "measured"]
    assert {row["arch"] for row in measured} == {"resnet20", "resnet9"}
    assert {row["precision"] for row in measured} == {"fp32", "tf32", "bf16"}
    cells = steps["concurrency"]["cells"]
    assert all(cells[k]["status"] == "measured" and cells[k]["images_per_s"] > 0 for k in ("1", "2"))
    lockstep = steps["lockstep"]["precisions"][0]
    assert lockstep["precision"] == "bf16" and lockstep["channels_last"]
    assert [row["models"] for row in lockstep["rows"]] == list(DRY.lockstep_models)
    assert all(row["fused_vs_processes"] > 0 for row in lockstep["rows"])
    assert [row["per_process"] and len(row["per_process"]) for row in lockstep["rows"]] == list(DRY.lockstep_models)
    assert all(goal["met"] is None for goal in results["goals"])  # a CPU dry run reads off no goal

    page = (out / "PERFORMANCE.md").read_text()
    assert outside_markers(page) == outside_markers(real_docs.decode())
    inside = between_markers(page)
    assert "Dry run (`--dry-run`) on the CPU" in inside and "| (g) lockstep |" in inside and "Lockstep (g)" in inside
    assert (out / "gpu_check.md").read_text().strip() == inside.strip()
    assert "===== lockstep =====" in (out / "gpu_check.log").read_text()
    assert docs.read_bytes() == real_docs and DOCS.read_bytes() == real_docs  # --out: the pages it read untouched


def test_a_tree_that_is_not_installed_gets_its_plugins_and_cli_through_links(tmp_path, monkeypatch):
    """As on the GPU machine, where the tree is not pip-installed: the steps' processes import
    this tree's initmem_plugins and initmem_cli from links made for them."""
    monkeypatch.setattr(gpu_check.importlib.util, "find_spec", lambda name: None)
    paths = gpu_check.pythonpath(tmp_path)
    assert paths[0] == str(tmp_path / "shim") and str(ROOT) in paths
    show = "import initmem_core, initmem_plugins, initmem_cli as c; print(initmem_plugins.__file__); print(c.__file__)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plugins, cli = (Path(line).resolve() for line in done.stdout.split())
    assert plugins.is_relative_to(ROOT / "plugins") and cli.is_relative_to(ROOT / "cli")
