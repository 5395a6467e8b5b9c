"""benchmarks/gpu_check.py, the one prepared GPU check: its dry run passes every step on the CPU, so
the script cannot rot, and it rewrites only its own section of docs/PERFORMANCE.md.

Only the plumbing is tested: the dry run's figures are toy-size CPU timings and nothing here
compares them. The module's own name keeps these tests out of the script's ``-k "cuda or gpu"``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_check
from tests.long_commands import benchmark, run_command

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "PERFORMANCE.md"


def between_markers(text: str) -> str:
    return text[text.index(gpu_check.BEGIN) + len(gpu_check.BEGIN) : text.index(gpu_check.END)]


def outside_markers(text: str) -> str:
    return text[: text.index(gpu_check.BEGIN)] + text[text.index(gpu_check.END) :]


def test_gpu_section_is_replaced_between_its_markers_and_nowhere_else(tmp_path):
    page = tmp_path / "PERFORMANCE.md"
    page.write_text(f"# Performance\n\nbefore\n\n## GPU\n\n{gpu_check.BEGIN}\nold figures\n{gpu_check.END}\n\nafter\n")
    gpu_check.write_section(page, "| new | table |")
    first = page.read_text()
    assert "old figures" not in first and between_markers(first).strip() == "| new | table |"
    assert first.startswith("# Performance\n\nbefore\n\n## GPU\n\n") and first.endswith(f"{gpu_check.END}\n\nafter\n")
    gpu_check.write_section(page, "| new | table |")
    assert page.read_text() == first  # a rerun replaces its section; nothing accumulates

    bare = tmp_path / "other.md"
    bare.write_text("# Performance\n\ntext\n")
    gpu_check.write_section(bare, "figures")
    text = bare.read_text()
    assert text.startswith("# Performance\n\ntext\n\n## GPU\n") and between_markers(text).strip() == "figures"


def test_gpu_section_of_the_docs_holds_the_markers_once_and_says_what_was_measured():
    text = DOCS.read_text()
    assert text.count(gpu_check.BEGIN) == 1 and text.count(gpu_check.END) == 1
    assert text.index("\n## GPU\n") < text.index(gpu_check.BEGIN)
    inside = between_markers(text)
    assert "Not yet measured on a GPU" in inside or "Measured by `python -m benchmarks.gpu_check` on" in inside
    assert "python -m benchmarks.gpu_check --dry-run" in text


def test_gpu_check_refuses_unknown_steps_in_one_line(capsys):
    with pytest.raises(SystemExit) as ended:
        gpu_check.main(["--dry-run", "--steps", "tests,speeed"])
    assert ended.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "speeed" in error and "concurrency" in error


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the check would run for real")
def test_gpu_check_without_a_gpu_points_to_the_dry_run(capsys):
    with pytest.raises(SystemExit) as ended:
        gpu_check.main([])
    assert ended.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--dry-run" in error and "Traceback" not in error


def gpu_check_dry_run(folder: Path) -> list[str]:
    """The script at toy size on the CPU, writing into a copy of docs/PERFORMANCE.md."""
    shutil.copy(DOCS, folder / "PERFORMANCE.md")
    return benchmark("gpu_check", "--dry-run", "--docs", str(folder / "PERFORMANCE.md"), "--json", "gpu.json")


@pytest.mark.slow(seconds=120)  # starts the script, which starts a dozen processes
def test_gpu_check_dry_run_passes_every_step(short_tmp):
    done = run_command(gpu_check_dry_run(short_tmp), short_tmp)
    docs, out = short_tmp / "PERFORMANCE.md", short_tmp / "gpu.json"
    real_docs = DOCS.read_bytes()
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    steps = results["steps"]
    assert set(steps) == set(gpu_check.STEPS)
    assert all(step["passed"] for step in steps.values()), {name: s.get("problems") for name, s in steps.items()}

    # What each step found, not only that it ran.
    tests = steps["tests"]  # the dry run runs the gpu-marked tests only (they skip here)
    outcomes = tests["outcomes"]
    assert tests["gpu_marked"] and set(tests["gpu_marked"]) == set(outcomes["skipped"]) and not outcomes["failed"]
    assert not set(tests["cpu_fakes"]) & set(outcomes["passed"] + outcomes["skipped"])
    assert not any("gpu_check" in test for test in tests["gpu_marked"] + tests["cpu_fakes"])  # no recursion
    assert "stopped in epoch 2 at step 7" in steps["divergence"]["detail"]
    assert "bit-identical" in steps["determinism"]["detail"] and "identical" in steps["resume"]["detail"]
    measured = [row for row in steps["speed"]["rows"] if row["status"] == "measured"]
    assert {row["arch"] for row in measured} == {"resnet20", "resnet9"}
    assert {row["precision"] for row in measured} == {"fp32", "tf32", "bf16"}
    assert all(row["step_ms"] > 0 and row["bare_step_ms"] > 0 and row["eval_s_per_epoch"] > 0 for row in measured)
    cells = steps["concurrency"]["cells"]
    assert all(cells[k]["status"] == "measured" and cells[k]["images_per_s"] > 0 for k in ("1", "2"))
    assert [goal["met"] for goal in results["goals"]] == [None, None]  # a CPU dry run reads off no goal

    page = docs.read_text()
    assert outside_markers(page) == outside_markers(real_docs.decode())
    inside = between_markers(page)
    assert "Dry run (`--dry-run`) on the CPU" in inside and "| (f) concurrency |" in inside
    assert DOCS.read_bytes() == real_docs  # the real page is written only by a run on a GPU
