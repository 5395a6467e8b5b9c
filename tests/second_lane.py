"""A second lane for the suite's few long, self-contained tests: a pytest plugin (conftest.py loads it).

A test marked ``@pytest.mark.second_lane(command=..., timeout_s=...)`` runs one command, a benchmark or a
pytest of its own, and then only reads what it wrote. The command needs nothing from the test, so
it is started as soon as the session's tests are collected, one such command at a time, in a thread
beside the session; the test itself is moved to the end of the session and reads the result there
(``second_lane_result``). Most of what those commands do is waiting on servers, subprocesses and
the faults they inject, so the suite's other tests use the CPU meanwhile.

``command`` is a callable that takes the test's own empty folder and returns the argv to run there.
A test that is deselected or skipped (by a ``skipif`` with a plain boolean) starts nothing; one whose
command was not started ahead (a ``skipif`` given as a string, which only its own run evaluates)
runs it when it is reached.

``takes_over=("test_x.py", ...)``: the command is a pytest of those files' ``slow`` tests, so this
session leaves them out (they are reported as deselected) while the lane runs them.

``nested_pytest(folder, *args)`` is the argv of such a pytest, its temporary files in the job's folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

MARKER = "second_lane"


def nested_pytest(folder: Path, *args: str) -> list[str]:
    """``python -m pytest -q ARGS`` for a lane job: its temporary files under ``folder`` (short, for
    the sockets of the servers it starts) and no cache written into the checkout."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={folder / 't'}", *args]


@dataclass
class LaneResult:
    """What a second-lane command left: its exit, output and folder, and how long it ran."""

    done: subprocess.CompletedProcess
    folder: Path
    seconds: float


@dataclass
class _Job:
    nodeid: str
    command: Callable[[Path], list[str]]
    timeout_s: float
    folder: Path
    future: Future
    process: subprocess.Popen | None = None


class _Lane:
    """The jobs of one session, run in order by one thread."""

    def __init__(self) -> None:
        self.jobs: dict[str, _Job] = {}
        self.root = Path(tempfile.mkdtemp(prefix="lane-"))  # short: AF_UNIX socket paths under it must fit 107 bytes
        self.stopping = threading.Event()

    def add(self, item: pytest.Item) -> None:
        marker = item.get_closest_marker(MARKER)
        folder = self.root / str(len(self.jobs))
        folder.mkdir()
        command, timeout_s = marker.kwargs["command"], marker.kwargs.get("timeout_s", 900)
        self.jobs[item.nodeid] = _Job(item.nodeid, command, timeout_s, folder, Future())

    def start(self) -> None:
        threading.Thread(target=self._run_all, name="second-lane", daemon=True).start()

    def _run_all(self) -> None:
        for job in self.jobs.values():
            if self.stopping.is_set():
                job.future.cancel()
                continue
            try:
                job.future.set_result(run_job(job))
            except BaseException as error:  # handed to the test that waits on it
                job.future.set_exception(error)

    def stop(self) -> None:
        """Ends what still runs (a session cut short), and removes the folders."""
        self.stopping.set()
        for job in self.jobs.values():
            if job.process is not None and job.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.process.pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the forked child only calls it


def _interrupted_when_orphaned(session_pid: int) -> Callable[[], None]:
    """Run in a job's process before its command: SIGINT when the thread that started it ends, as
    when pytest is killed outright (SIGKILL), so that the job (a pytest, a benchmark) ends and
    stops what it started rather than running on alone."""

    def arm() -> None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGINT)
        if os.getppid() != session_pid:  # killed before the line above
            os._exit(1)

    return arm


def run_job(job: _Job) -> LaneResult:
    """The job's command in its folder, in a session of its own (killed whole if it runs over)."""
    start = time.monotonic()
    argv = job.command(job.folder)
    job.process = subprocess.Popen(
        argv,
        cwd=job.folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_interrupted_when_orphaned(os.getpid()),
    )
    try:
        out, err = job.process.communicate(timeout=job.timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(job.process.pid, signal.SIGKILL)
        out, err = job.process.communicate()
        err += f"\n(second lane: killed after {job.timeout_s:g} s)"
    done = subprocess.CompletedProcess(argv, job.process.returncode, out, err)
    return LaneResult(done, job.folder, time.monotonic() - start)


def _skipped_outright(item: pytest.Item) -> bool:
    """A ``skip`` marker, or a ``skipif`` whose condition is a plain true value."""
    if item.get_closest_marker("skip") is not None:
        return True
    return any(
        marker.args and all(isinstance(c, bool) for c in marker.args) and any(marker.args)
        for marker in item.iter_markers("skipif")
    )


_lane = _Lane()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(command=..., timeout_s=900, takes_over=()): the test's command starts once tests are collected "
        "and runs beside the session (tests/second_lane.py); the test runs last and reads its result",
    )


@pytest.hookimpl(trylast=True)  # after -m, -k and deselection have chosen the session's tests
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.collectonly or hasattr(config, "workerinput"):
        return  # a pytest-xdist worker (the quick loop's -n 2): lane tests run their command where they stand
    lane = [item for item in items if item.get_closest_marker(MARKER) and not _skipped_outright(item)]
    for item in lane:
        _lane.add(item)
    taken = _taken_over(lane, items)
    if taken:
        config.hook.pytest_deselected(items=taken)
    items[:] = [item for item in items if item not in lane and item not in taken] + lane
    if lane:
        _lane.start()


def _taken_over(lane: list[pytest.Item], items: list[pytest.Item]) -> list[pytest.Item]:
    """The slow tests of the files a lane job runs in a pytest of its own."""
    files = {name for item in lane for name in item.get_closest_marker(MARKER).kwargs.get("takes_over", ())}
    return [
        item
        for item in items
        if item.path.name in files and item.get_closest_marker("slow") and not item.get_closest_marker(MARKER)
    ]


def pytest_sessionfinish(session: pytest.Session) -> None:
    _lane.stop()


def pytest_terminal_summary(terminalreporter) -> None:
    finished = [job for job in _lane.jobs.values() if job.future.done() and not job.future.cancelled()]
    if finished:
        terminalreporter.section("second lane")
        for job in finished:
            seconds = job.future.result().seconds if job.future.exception() is None else float("nan")
            terminalreporter.write_line(f"{seconds:7.1f}s  {job.nodeid}")


@pytest.fixture
def second_lane_result(request: pytest.FixtureRequest, tmp_path: Path) -> LaneResult:
    """The test's second-lane command, once it has ended (run here if it was not started ahead)."""
    job = _lane.jobs.get(request.node.nodeid)
    if job is None:
        marker = request.node.get_closest_marker(MARKER)
        command, timeout_s = marker.kwargs["command"], marker.kwargs.get("timeout_s", 900)
        return run_job(_Job(request.node.nodeid, command, timeout_s, tmp_path, Future()))
    return job.future.result()
