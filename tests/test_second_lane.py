"""The slow tests of the suite's long files that start and kill `initmem` sweeps, run in one pytest
of their own in the second lane (tests/second_lane.py), beside the rest of the suite: their
processes mostly wait on one another, so the two lanes share the CPU. Run alone, each file's tests
run as usual (`python -m pytest tests/test_sweep_faults.py`)."""

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
