"""benchmarks/gpu_check.py, the one prepared GPU check, run as a command as on the GPU machine: its
dry run passes every step on the CPU with MLflow unimportable, so the script cannot rot, and writes
only its own section of a copy of the docs page; ``pytest -m gpu`` collects and runs there; bad
input is one line.

Only the plumbing is tested: the dry run's figures are toy-size CPU timings and nothing here
compares them. The script is never imported here (tests and benchmarks import nothing of each other).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support import ROOT
from tests.support.blocked_imports import command_without, environment_without
from tests.support.long_commands import run_command

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
DOCS = ROOT / "docs" / "PERFORMANCE.md"
#: What the GPU machine lacks of what the tests and their extras install (/work/.library/device/KINDS.md).
GPU_MACHINE_LACKS = ("mlflow", "ray", "submitit", "psycopg2")
#: The lines around the section the script writes, and its steps in order (as its --help lists them).
BEGIN = "<!-- gpu_check: begin (written by benchmarks/gpu_check.py; rerun it rather than editing) -->"
END = "<!-- gpu_check: end -->"
NAMES = ("tests", "determinism", "divergence", "resume", "speed", "concurrency", "lockstep")
DRY_LOCKSTEP_MODELS = [1, 2]


def between_markers(text: str) -> str:
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)]


def outside_markers(text: str) -> str:
    return text[: text.index(BEGIN)] + text[text.index(END) :]


def device_command() -> str:
    """The one command docs/PERFORMANCE.md gives for the GPU machine."""
    text = DOCS.read_text()
    block = text.split("<!-- device command -->", 1)[1]
    return re.search(r"```bash\n(.*?)\n```", block, flags=re.S).group(1)


def test_gpu_section_of_the_docs_holds_the_markers_once_and_says_what_was_measured():
    text = DOCS.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert text.index("\n## GPU\n") < text.index(BEGIN)
    inside = between_markers(text)
    assert "Not yet measured on a GPU" in inside or "Measured by `python -m benchmarks.gpu_check` on" in inside
    assert "python -m benchmarks.gpu_check --dry-run" in text


@pytest.mark.slow(seconds=5)  # starts the script
def test_gpu_check_refuses_unknown_steps_in_one_line(tmp_path):
    done = run_command([sys.executable, str(SCRIPT), "--dry-run", "--steps", "tests,speeed"], tmp_path, timeout_s=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "speeed" in done.stderr and "lockstep" in done.stderr


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
    # The gpu-marked tests, collected from the whole suite and run with MLflow missing, as on the GPU
    # machine: none fails or errs (the step passed: pytest exited 0), and without CUDA every one skips.
    tests = steps["tests"]
    assert tests["gpu_marked"] and set(tests["gpu_marked"]) == set(tests["outcomes"]["skipped"])
    assert tests["outcomes"]["failed"] == [] and (torch.cuda.is_available() or tests["outcomes"]["passed"] == [])
    assert "stopped in epoch 2 at step 7" in steps["divergence"]["detail"]
    assert "bit-identical" in steps["determinism"]["detail"] and "identical" in steps["resume"]["detail"]
    measured = [row for row in steps["speed"]["rows"] if row["status"] == "measured"]
    assert {row["arch"] for row in measured} == {"resnet20", "resnet9"}
    assert {row["precision"] for row in measured} == {"fp32", "tf32", "bf16"}
    cells = steps["concurrency"]["cells"]
    assert all(cells[k]["status"] == "measured" and cells[k]["images_per_s"] > 0 for k in ("1", "2"))
    lockstep = steps["lockstep"]["precisions"][0]
    assert lockstep["precision"] == "bf16" and lockstep["channels_last"]
    assert [row["models"] for row in lockstep["rows"]] == DRY_LOCKSTEP_MODELS
    assert all(row["fused_vs_processes"] > 0 for row in lockstep["rows"])
    assert [row["per_process"] and len(row["per_process"]) for row in lockstep["rows"]] == DRY_LOCKSTEP_MODELS
    # the product path: a fused sweep job of whole cells, one cell alone, K processes of one cell each
    product = steps["lockstep"]["product"]
    assert product["fused"]["outcomes"] == [["FINISHED", ""]] * product["models"]
    assert [product[side]["cells"] for side in ("one cell", "fused", "processes")] == [1, 2, 2]
    assert len(product["processes"]["per_process_s"]) == 2
    assert all(product[side]["cells_per_hour"] > 0 for side in ("one cell", "fused", "processes"))
    assert product["fused_vs_processes"] > 0 and product["fused_vs_one_cell"] > 0
    assert all(goal["met"] is None for goal in results["goals"])  # a CPU dry run reads off no goal

    page = (out / "PERFORMANCE.md").read_text()
    assert outside_markers(page) == outside_markers(real_docs.decode())
    inside = between_markers(page)
    assert "Dry run (`--dry-run`) on the CPU" in inside and "| (g) lockstep |" in inside and "Lockstep (g)" in inside
    assert "Lockstep's product path (g)" in inside and "| one fused job | 2 |" in inside
    assert (out / "gpu_check.md").read_text().strip() == inside.strip()
    assert "===== lockstep =====" in (out / "gpu_check.log").read_text()
    assert docs.read_bytes() == real_docs and DOCS.read_bytes() == real_docs  # --out: the pages it read untouched
