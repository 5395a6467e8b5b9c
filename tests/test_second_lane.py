"""The slow tests of the suite's long files that start and kill `initmem` sweeps, run in one pytest
of their own in the second lane (tests/second_lane.py), beside the rest of the suite: their
processes mostly wait on one another, so the two lanes share the CPU. Run alone, each file's tests
run as usual (`python -m pytest tests/test_sweep_faults.py`). And the lane itself: a job does not
outlive a pytest killed outright."""

from __future__ import annotations

from pathlib import Path

import pytest
from second_lane import nested_pytest

TESTS = Path(__file__).resolve().parent
FILES = ("test_sweep_faults.py",)


def slow_tests_of_the_files(folder: Path) -> list[str]:
    return nested_pytest(folder, "-m", "slow", *(str(TESTS / name) for name in FILES))


@pytest.mark.slow  # a pytest of sweeps and servers
@pytest.mark.second_lane(command=slow_tests_of_the_files, timeout_s=1200, takes_over=FILES)
def test_the_slow_tests_of_the_long_files_pass_in_the_second_lane(second_lane_result):
    done = second_lane_result.done
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout.splitlines()[-1] and " failed" not in done.stdout.splitlines()[-1], tail


@pytest.mark.slow  # starts a pytest and kills it
def test_a_lane_job_ends_when_its_pytest_is_killed_outright(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    pid_file = tmp_path / "job.pid"
    (tmp_path / "test_outer.py").write_text(
        textwrap.dedent(
            f"""
            import time
            import pytest

            def sleeper(folder):
                return ["sh", "-c", "echo $$ > {pid_file}; exec sleep 300"]

            @pytest.mark.second_lane(command=sleeper)
            def test_in_the_lane(second_lane_result):
                pass

            def test_meanwhile():
                time.sleep(300)
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    outer = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "second_lane", "-p", "no:cacheprovider", "test_outer.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.is_file() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        job = int(pid_file.read_text())
        outer.kill()
        outer.wait()
        deadline = time.monotonic() + 10
        while _running(job) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(job), "the lane's job outlived its pytest"
    finally:
        outer.kill()
        if pid_file.is_file() and _running(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"
