"""benchmarks/bench.py runs end to end: every section reports positive numbers.

Only the plumbing is tested; timings on a shared machine are not, so nothing here compares
two figures or checks a target.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.long_commands import benchmark, run_command

pytestmark = pytest.mark.slow(seconds=60)  # runs the benchmark script


def positive(stats: dict) -> bool:
    return all(stats[key] > 0 for key in ("median", "min", "max")) and all(v > 0 for v in stats["samples"])


def quick_benchmark(folder: Path) -> list[str]:
    # One torch thread: with two OpenMP threads on a machine busy with other tests, each parallel
    # region waits for a descheduled thread and the run slows several-fold.
    return benchmark("bench", "--quick", "--threads", "1", "--json", "bench.json")


def test_quick_benchmark_reports_every_section(short_tmp):
    done = run_command(quick_benchmark(short_tmp), short_tmp, timeout_s=300)  # --quick takes well under a minute
    out = short_tmp / "bench.json"
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())

    assert {"machine", "plan", "train", "pipeline", "tracking", "cli"} <= set(results)
    assert results["machine"]["cores"] > 0 and results["machine"]["threads"] > 0
    assert set(results["train"]) == {"resnet20", "resnet9"}
    for pair in results["train"].values():
        assert positive(pair["initmem"]) and positive(pair["bare"]) and positive(pair["ratio"])
        assert isinstance(pair["met"], bool)
    pipeline = results["pipeline"]
    assert positive(pipeline["device"]) and positive(pipeline["torchvision"]) and positive(pipeline["speedup"])
    tracking = results["tracking"]
    assert all(positive(tracking[side]) for side in ("mlflow_checkpoints", "mlflow", "checkpoints", "off"))
    assert set(tracking["overhead"]) == {"mlflow", "mlflow_with_checkpoints", "checkpoints", "default_vs_bare"}
    assert all(len(o["samples"]) == len(tracking["off"]["samples"]) for o in tracking["overhead"].values())
    assert positive(tracking["in_line"]["mlflow"]["tracker"]) and positive(
        tracking["in_line"]["checkpoints"]["checkpoints"]
    )
    assert all(positive(fraction) for fraction in tracking["in_line_fraction"].values())
    assert isinstance(tracking["met"], bool)
    cli = results["cli"]
    assert {"python -c pass", "initmem --help", "initmem plugins"} <= set(cli["times"])
    assert all(positive(stats) for stats in cli["times"].values())
    assert set(cli["heavy_modules_imported"]) == {"initmem --help", "initmem plugins"}
