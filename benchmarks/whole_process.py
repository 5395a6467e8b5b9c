"""Whole processes as a user meets them: initmem commands from the shell against a bare script.

Each comparison runs its two sides as separate processes, alternating which goes first, for
``--pairs`` pairs, and reports the median ratio of wall time (and of CPU time) with its range.
Both sides train ResNet-20 on digits for ``--epochs`` epochs at batch 32 on one torch thread and
evaluate the clean training set, validation and test every epoch (``benchmarks/bare_run.py`` is
the bare side). Comparisons:

- ``untracked``: ``initmem run --no-tracking --checkpoint-every 0`` vs the bare script;
- ``tracked``: ``initmem run`` as it comes (MLflow and per-epoch checkpoints), store already there;
- ``fresh``: the same in an empty folder, so the store is created by the run;
- ``sweep``: ``initmem sweep`` of 4 sigmas with ``--workers 2`` vs the bare script 4 times, 2 at a time;
- ``tracked-same-exit``, ``fresh-same-exit``: ``tracked`` and ``fresh`` against the bare script
  ending as ``initmem`` does (no interpreter teardown, ``--fast-exit``), so that the ratio shows
  what initmem adds alone.

    python -m benchmarks.whole_process --pairs 5 --json whole_process.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.machine_info import describe

BARE = [sys.executable, str(Path(__file__).with_name("bare_run.py"))]
INITMEM = [sys.executable, "-m", "initmem_cli"]
SIGMAS = ("0.5", "1", "2", "4")


def timed(commands: list[list[str]], cwd: Path, parallel: int = 1) -> tuple[float, float]:
    """Wall and CPU seconds (children's user + system) of ``commands``, ``parallel`` at a time."""
    before, start = os.times(), time.perf_counter()
    pending = list(commands)
    while pending:
        batch, pending = pending[:parallel], pending[parallel:]
        running = [subprocess.Popen(c, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in batch]
        for process in running:
            _, err = process.communicate()
            if process.returncode:
                raise SystemExit(f"{' '.join(process.args)} failed:\n{err.decode()[-2000:]}")
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return time.perf_counter() - start, cpu


def sides(name: str, epochs: int, folder: Path) -> tuple[list[list[str]], list[list[str]], int, Path | None]:
    """(initmem commands, bare commands, parallelism, a folder to empty before each initmem side)."""
    run = ["run", "--epochs", str(epochs), "--batch-size", "32", "--threads", "1"]
    bare = [*BARE, "--epochs", str(epochs)]
    if name == "untracked":
        return [[*INITMEM, *run, "--no-tracking", "--checkpoint-every", "0"]], [bare], 1, None
    if name == "tracked":
        return [[*INITMEM, *run]], [bare], 1, None
    if name == "tracked-same-exit":
        return [[*INITMEM, *run]], [[*bare, "--fast-exit"]], 1, None
    if name == "fresh-same-exit":
        return [[*INITMEM, *run]], [[*bare, "--fast-exit"]], 1, folder
    if name == "fresh":
        return [[*INITMEM, *run]], [bare], 1, folder
    sweep = [
        "sweep",
        "--epochs",
        str(epochs),
        "--batch-size",
        "32",
        "--threads",
        "1",
        "--workers",
        "2",
        "--sigma",
        ",".join(SIGMAS),
        "--name",
        "bench",
    ]
    return [[*INITMEM, *sweep]], [[*bare, "--sigma", s] for s in SIGMAS], 2, folder


def compare(name: str, pairs: int, epochs: int, root: Path) -> dict:
    work = root / name
    work.mkdir()
    ours, bare, parallel, fresh = sides(name, epochs, work)
    if name in ("tracked", "tracked-same-exit"):
        timed(ours, work)  # creates the store: this comparison is about a store that is there
    walls, cpus = [], []
    for pair in range(pairs):
        results = {}
        for side in ("ours", "bare") if pair % 2 == 0 else ("bare", "ours"):
            if side == "ours" and fresh is not None:  # an empty folder: the store is created again
                for path in sorted(fresh.iterdir()):
                    subprocess.run(["rm", "-rf", str(path)], check=True)
            commands = ours if side == "ours" else bare
            results[side] = timed(commands, work, parallel if side == "bare" else 1)
        walls.append(results["ours"][0] / results["bare"][0])
        cpus.append(results["ours"][1] / results["bare"][1])
        print(
            f"{name} pair {pair + 1}: wall {walls[-1]:.3f}x  cpu {cpus[-1]:.3f}x  "
            f"(ours {results['ours'][0]:.1f} s, bare {results['bare'][0]:.1f} s)",
            flush=True,
        )
    return {
        "comparison": name,
        "pairs": pairs,
        "wall_median": statistics.median(walls),
        "wall_min": min(walls),
        "wall_max": max(walls),
        "cpu_median": statistics.median(cpus),
        "walls": walls,
        "cpus": cpus,
    }


def machine() -> str:
    return describe()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument(
        "--only", nargs="*", default=["untracked", "tracked", "fresh", "sweep", "tracked-same-exit", "fresh-same-exit"]
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="initmem-bench-") as folder:
        results = [compare(name, args.pairs, args.epochs, Path(folder)) for name in args.only]
    print(f"\n{machine()}, commit {commit}")
    print("| comparison | wall, median (range) | cpu, median |\n|---|---|---|")
    for r in results:
        print(
            f"| {r['comparison']} | {r['wall_median']:.2f}x ({r['wall_min']:.2f}-{r['wall_max']:.2f}) "
            f"| {r['cpu_median']:.2f}x |"
        )
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "commit": commit, "results": results}, indent=2))


if __name__ == "__main__":
    main()
