"""Ctrl-C (or another signal) at many moments of `initmem run`'s first seconds (issue 23).

Each try starts `initmem run` (ResNet-20 on digits, a few epochs) in a fresh folder, sends the
signal after a given delay, and checks what a user sees: the exit code (128 + the signal), how
long the command took to end after the signal, that stderr is one line without a traceback, that
the tracking helper is gone and that nothing in the folder changes after the command has exited.
The moments run from ``--first`` to ``--last`` seconds in ``--tries`` even steps.

    python -m benchmarks.signal_moments --tries 20 --first 0.15 --last 3.0 --signal SIGINT
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.cli_processes import alive, descendants, folder_state

ROOT = Path(__file__).resolve().parents[1]

RUN = ["--epochs", "6", "--train-size", "256", "--batch-size", "32", "--threads", "1", "--eval-batch-size", "512"]


def one_try(folder: Path, moment: float, signum: int) -> dict:
    process = subprocess.Popen(
        [sys.executable, "-m", "initmem_cli", "run", *RUN, "--tracking-uri", f"sqlite:///{folder / 'mlflow.db'}"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(moment)
    helpers = descendants(process.pid)
    process.send_signal(signum)
    sent = time.monotonic()
    error = process.stderr.read()
    code = process.wait()
    took = time.monotonic() - sent
    left = folder_state(folder)
    while any(alive(pid) for pid in helpers) and time.monotonic() - sent < took + 5:
        time.sleep(0.05)
    helper_s = time.monotonic() - sent - took
    time.sleep(0.5)
    return {
        "moment": moment,
        "code": code,
        "took": took,
        "helper_after": helper_s,
        "one_line": error.count("\n") == 1 and "Traceback" not in error,
        "nothing_after": folder_state(folder) == left,
        "line": error.strip()[:100],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--first", type=float, default=0.15)
    parser.add_argument("--last", type=float, default=3.0)
    parser.add_argument("--signal", default="SIGINT", choices=["SIGINT", "SIGTERM", "SIGHUP"])
    parser.add_argument("--fresh-store", action="store_true", help="no store in the folder: the run creates it")
    args = parser.parse_args()
    signum = getattr(signal, args.signal)
    template = None
    if not args.fresh_store:
        from initmem_core.tracking.client import open_client

        template = Path(tempfile.mkdtemp()) / "mlflow.db"
        open_client(f"sqlite:///{template}")
    step = (args.last - args.first) / max(args.tries - 1, 1)
    good = 0
    for i in range(args.tries):
        with tempfile.TemporaryDirectory() as name:
            folder = Path(name)
            if template is not None:
                shutil.copy(template, folder / "mlflow.db")
            result = one_try(folder, args.first + i * step, signum)
        ok = (
            result["code"] == 128 + signum
            and result["took"] < 2.0
            and result["one_line"]
            and result["helper_after"] < 2.0
            and result["nothing_after"]
        )
        good += ok
        print(
            f"{result['moment']:5.2f} s  exit {result['code']}  ended {result['took']:.2f} s after the signal  "
            f"helper +{result['helper_after']:.2f} s  {'ok' if ok else 'FAILED'}  {result['line']}"
        )
    print(
        f"{good} of {args.tries} tries: one line, exit {128 + signum} within 2 s, no helper left, nothing written after"
    )


if __name__ == "__main__":
    main()
