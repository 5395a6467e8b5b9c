"""Lockstep sweeps against plain ones, as whole processes: cells per hour and their ratio.

    python -m benchmarks.lockstep [--epochs 10] [--write-docs]
    python -m benchmarks.lockstep --data fashion-mnist --data-dir DIR --epochs 3 [--write-docs]

Runs the same sweep (ResNet-20, b = 32, 4 sigmas x 2 seeds, ``--workers 2``, tracking and
evaluation on; digits whole, or Fashion-MNIST at its presets' sizes: 500 training images, 500
validation and test) with ``--lockstep off`` and ``--lockstep on``, each as one ``initmem sweep``
process into its own fresh store, and reports wall time, cells per hour and the ratio, with the
machine (``machine_info``), its load average and the code measured (``timing.code_version``).
Each sweep's per-cell best-validation test accuracy is printed beside the other's (same seeds:
they differ by float rounding grown over training, within seed noise). ``--write-docs`` puts the
table into docs/PERFORMANCE.md between its dataset's lockstep markers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.machine_info import describe
from benchmarks.timing import ROOT, code_version

SIGMAS, SEEDS = "0.5,1,2,4", "0,1"
#: What each dataset's sweep adds to the command: Fashion-MNIST at its presets' sizes (paper-fmnist).
DATA_ARGS = {"digits": [], "fashion-mnist": ["--train-size", "500", "--eval-size", "500"]}


def markers(data: str) -> tuple[str, str]:
    """The docs block of a dataset's table (digits' kept its first, unsuffixed name)."""
    name = "lockstep" if data == "digits" else f"lockstep-{data}"
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def sweep(mode: str, epochs: int, folder: Path, data: list[str]) -> tuple[float, dict[str, float]]:
    """One whole sweep process; returns its wall seconds and each cell's test accuracy at selection."""
    command = [
        str(Path(sys.executable).parent / "initmem"),
        "sweep",
        "--arch",
        "resnet20",
        *data,
        "--batch-size",
        "32",
        "--epochs",
        str(epochs),
        "--sigma",
        SIGMAS,
        "--seed",
        SEEDS,
        "--workers",
        "2",
        "--lockstep",
        mode,
        "--name",
        f"bench-{mode}",
        "--tracking-uri",
        f"sqlite:///{folder / 'store.db'}",
        "--out",
        str(folder / "out"),
        "--json",
    ]
    began = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"the {mode} sweep failed:\n{done.stderr[-3000:]}")
    from mlflow import MlflowClient  # after the timed process: its import is not counted

    client = MlflowClient(f"sqlite:///{folder / 'store.db'}")
    accuracies = {
        cell["label"]: client.get_run(cell["run_id"]).data.metrics.get("best_val_test_acc", float("nan"))
        for cell in json.loads(done.stdout)["cells"]
    }
    return seconds, accuracies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--data", choices=sorted(DATA_ARGS), default="digits")
    parser.add_argument("--data-dir", help="the dataset's files (Fashion-MNIST's IDX files)")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    data = ["--data", args.data, *(["--data-dir", args.data_dir] if args.data_dir else []), *DATA_ARGS[args.data]]
    cells = len(SIGMAS.split(",")) * len(SEEDS.split(","))
    results = {}
    for mode in ("off", "on"):
        with tempfile.TemporaryDirectory() as folder:
            results[mode] = sweep(mode, args.epochs, Path(folder), data)
    load = os.getloadavg()[0]
    rows = [
        f"| {mode} | {seconds:.0f} s | {cells * 3600 / seconds:.0f} |"
        for mode, (seconds, _) in (("unfused", results["off"]), ("--lockstep on", results["on"]))
    ]
    ratio = results["off"][0] / results["on"][0]
    version = code_version()
    table = "\n".join(
        [
            f"`python -m benchmarks.lockstep {' '.join(sys.argv[1:])}` ({describe()}; load average "
            f"{load:.1f} at the end; code {version.get('commit', '?')}): "
            f"{' '.join([args.data, *DATA_ARGS[args.data]])}, ResNet-20, b = 32, {cells} cells, --workers 2, "
            "whole `initmem sweep` processes",
            "",
            "| sweep | wall | cells/hour |",
            "| --- | ---: | ---: |",
            *rows,
            "",
            f"Fused over unfused: **{ratio:.2f}x**.",
        ]
    )
    print(table)
    for cell, accuracy in results["off"][1].items():
        print(f"{cell}: unfused {accuracy:.4f}  fused {results['on'][1].get(cell, float('nan')):.4f}")
    if args.write_docs:
        path = ROOT / "docs" / "PERFORMANCE.md"
        text = path.read_text()
        begin, end = markers(args.data)
        block = f"{begin}\n{table}\n{end}"
        if begin in text:
            text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
        else:  # after digits' block, in its section
            digits_end = markers("digits")[1]
            text = text.replace(digits_end, f"{digits_end}\n\n{block}", 1)
        path.write_text(text)


if __name__ == "__main__":
    main()
