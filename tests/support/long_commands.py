"""The suite's few long, self-contained tests each run one command (a benchmark, a script, a pytest
of their own) and then read what it wrote. ``run_command`` runs it in its own session, so that a
command that runs over its time ends whole, servers and subprocesses with it.

They are marked ``slow(seconds=...)``: conftest.py starts the longest tests first, so that under
``-n 2 --dist loadgroup`` none of them queues behind the short ones at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def nested_pytest(folder: Path, *args: str) -> list[str]:
    """``python -m pytest -q ARGS``, its temporary files under ``folder`` (short, for the sockets of
    the servers it starts) and no cache written into the checkout."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={folder / 't'}", *args]


def benchmark(name: str, *args: str) -> list[str]:
    """``python -m benchmarks.NAME ARGS`` (``run_command`` puts the repository root on its path)."""
    return [sys.executable, "-m", f"benchmarks.{name}", *args]


def run_command(argv: list[str], folder: Path, timeout_s: float = 900) -> subprocess.CompletedProcess:
    """``argv`` run in ``folder`` in a session of its own, the repository root on its
    ``PYTHONPATH`` (for ``benchmark``); killed whole after ``timeout_s`` (its stderr then says so)
    or when the test is interrupted."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    process = subprocess.Popen(
        argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_session(process)
        out, err = process.communicate()
        err += f"\n(killed after {timeout_s:g} s)"
    finally:
        _kill_session(process)  # an interrupted test leaves nothing running
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def _kill_session(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
