"""How long ``initmem ui`` takes to answer, as a user starts it from the shell.

Each start launches ``initmem ui`` on a free port and clocks, from the moment the process is
started:

- ``urls``: the first URL printed (``initmem ui`` prints nothing before ``/health`` answers);
- ``view``: the prepared view served: the page, its main script, the experiment (whose tag holds
  the saved view) and the search for the sweep's cells, each answered 200. (What the browser
  then spends drawing is not counted: it does not depend on how the server was started.)
- ``cpu``: CPU seconds (user + system) of ``initmem ui`` and the processes it waited for, from
  its start to its stop right after ``view``: what a start costs whatever else the machine runs.

Sides, alternated (A B B A ...) for ``--starts`` starts each:

- ``lean``: ``initmem ui`` as it comes (one uvicorn worker, no job runner);
- ``mlflow-default``: ``initmem ui --workers 4 --jobs``, which is how MLflow starts its server
  by default and how ``initmem ui`` started it before;
- ``fresh``: ``initmem ui`` on a folder with no store yet (``initmem ui`` creates it, then the
  server starts); only ``urls`` and the page, since a fresh store holds no sweep.

The warm sides read a store holding a finished 4-cell sweep (made here, ~15 s, unless
``--tracking-uri`` names one with a sweep).

    python -m benchmarks.ui_startup --starts 5 --json ui_startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks.machine_info import cpu_model

INITMEM_UI = [sys.executable, "-m", "initmem_cli", "ui"]
SIDES = {"lean": [], "mlflow-default": ["--workers", "4", "--jobs"]}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def make_sweep(folder: Path) -> str:
    from initmem_core import run_sweep

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    run_sweep(
        {
            "opt": "sgd,adam",
            "sigma": "0.5,2.0",
            "data": "digits",
            "epochs": 1,
            "train_size": 64,
            "threads": 1,
            "checkpoint_every": 0,
        },
        name="ui-startup",
        tracking_uri=uri,
        out=folder / "out",
    )
    return uri


def fetch(url: str, data: bytes | None = None) -> bytes:
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(request, timeout=60) as response:
        if response.status != 200:
            raise SystemExit(f"{url} answered {response.status}")
        return response.read()


def serve_view(view: str) -> None:
    """What the browser fetches from the server to show the prepared view."""
    base, _, fragment = view.partition("/#/")
    page = fetch(f"{base}/").decode()
    script = re.search(r'src="([^"]*main\.[0-9a-f]+\.js)"', page)
    if script:
        fetch(f"{base}/{script.group(1).lstrip('./')}")
    experiment = re.match(r"experiments/(\d+)/runs", fragment)
    if not experiment:
        return
    found = json.loads(fetch(f"{base}/ajax-api/2.0/mlflow/experiments/get?experiment_id={experiment.group(1)}"))
    tags = {t["key"]: t["value"] for t in found["experiment"].get("tags", [])}
    key = re.search(r"viewStateShareKey=([^&]+)", fragment).group(1)
    state = json.loads(json.loads(tags[f"mlflow.sharedViewState.{key}"])["state"])
    body = json.dumps({"experiment_ids": [experiment.group(1)], "filter": state["searchFilter"], "max_results": 100})
    runs = json.loads(fetch(f"{base}/ajax-api/2.0/mlflow/runs/search", body.encode()))
    if not runs.get("runs"):
        raise SystemExit("the view's search found no runs")


def start(options: list[str], uri: str, cwd: Path) -> dict[str, float]:
    """One start of ``initmem ui``: seconds to the URLs and to the view served; then stopped."""
    port = free_port()
    before = os.times()
    began = time.perf_counter()
    process = subprocess.Popen(
        [*INITMEM_UI, "--port", str(port), "--tracking-uri", uri, *options],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    times: dict[str, float] = {}
    try:
        lines = []
        while True:
            line = process.stdout.readline()
            if not line:
                raise SystemExit(f"initmem ui ended before answering: {process.stderr.read()[-2000:]}")
            if "http://" in line and "urls" not in times:
                times["urls"] = time.perf_counter() - began
            lines.append(line)
            if "Ctrl-C" in line:
                break
        urls = [line.split()[-1] for line in lines if "http://" in line]
        serve_view(urls[-1])
        times["view"] = time.perf_counter() - began
    finally:
        process.send_signal(signal.SIGTERM)  # initmem ui stops the server's whole process group
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    after = os.times()
    times["cpu"] = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return times


def summary(samples: list[float]) -> dict:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=5, help="starts per side")
    parser.add_argument("--tracking-uri", help="a store holding a finished sweep (default: make one)")
    parser.add_argument("--sides", default="lean,mlflow-default,fresh")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    sides = args.sides.split(",")
    results: dict = {"machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}}
    from importlib.metadata import version

    results["machine"]["mlflow"] = version("mlflow")
    with tempfile.TemporaryDirectory(prefix="ui-startup-") as scratch:
        folder = Path(scratch)
        uri = args.tracking_uri or make_sweep(folder)
        samples: dict[str, dict[str, list[float]]] = {side: {"urls": [], "view": [], "cpu": []} for side in sides}
        results["load_before"] = os.getloadavg()
        loads: list[float] = []
        started_at = time.time()
        warm = [side for side in sides if side in SIDES]
        for i in range(args.starts):
            order = warm if i % 2 == 0 else warm[::-1]
            if "fresh" in sides:
                order = [*order, "fresh"]
            for side in order:
                if side == "fresh":
                    empty = folder / f"fresh-{i}"
                    empty.mkdir()
                    times = start([], f"sqlite:///{empty / 'mlflow.db'}", empty)
                else:
                    times = start(SIDES[side], uri, folder)
                for what, seconds in times.items():
                    samples[side][what].append(seconds)
                loads.append(os.getloadavg()[0])
                print(
                    f"{side:>15} start {i + 1}: "
                    + ", ".join(f"{k} {v:.2f} s" for k, v in times.items())
                    + f" (1-min load {loads[-1]:.1f})",
                    flush=True,
                )
                time.sleep(1)  # let the stopped server's processes go before the next start
        results["load_after"] = os.getloadavg()
        results["load_1min_at_each_start"] = summary(loads)
        results["seconds"] = round(time.time() - started_at, 1)
    results["sides"] = {side: {what: summary(v) for what, v in got.items() if v} for side, got in samples.items()}
    if "lean" in sides and "mlflow-default" in sides:
        results["ratio_lean_vs_default"] = {
            what: [a / b for a, b in zip(samples["lean"][what], samples["mlflow-default"][what])]
            for what in ("urls", "view", "cpu")
        }
        results["ratio_lean_vs_default"] = {what: summary(r) for what, r in results["ratio_lean_vs_default"].items()}
    print()
    print(f"{'side':>15} {'urls (median, min-max)':>26} {'view (median, min-max)':>26} {'CPU s (median, min-max)':>26}")
    for side, got in results["sides"].items():
        cells = [
            f"{s['median']:.2f} s ({s['min']:.2f}-{s['max']:.2f})" if s else "-"
            for s in (got.get("urls"), got.get("view"), got.get("cpu"))
        ]
        print(f"{side:>15} {cells[0]:>26} {cells[1]:>26} {cells[2]:>26}")
    print(
        f"1-min load average after each start: median {results['load_1min_at_each_start']['median']:.1f} "
        f"({results['load_1min_at_each_start']['min']:.1f}-{results['load_1min_at_each_start']['max']:.1f})"
    )
    for what, ratio in results.get("ratio_lean_vs_default", {}).items():
        print(f"lean / mlflow-default, {what}: {ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
