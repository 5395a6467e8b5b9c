"""The Ray and Slurm executor tests, and the Ray test of a login to the tracking server, run where
Ray's traffic cannot leave the machine: one pytest in one network namespace for both files (each
start of one costs a Python with torch and a login server), in the suite's second lane."""

from __future__ import annotations

from pathlib import Path

import pytest
from network_isolation import isolated, loopback_only
from second_lane import nested_pytest

TESTS = Path(__file__).resolve().parent
RAY_LOGIN = f"{TESTS / 'test_tracking_login.py'}::test_ray_tasks_get_the_login_though_their_head_never_saw_it"


def isolated_suite(folder: Path) -> list[str]:
    return isolated(nested_pytest(folder, str(TESTS / "test_executors.py"), RAY_LOGIN))


@pytest.mark.slow  # the Ray and Slurm suite in a network namespace
@pytest.mark.skipif(loopback_only(), reason="already isolated: test_executors.py runs directly")
@pytest.mark.second_lane(command=isolated_suite, timeout_s=1200)
def test_executor_suite_and_the_ray_login_in_a_private_network_namespace(second_lane_result):
    done = second_lane_result.done
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and " skipped" not in done.stdout.splitlines()[-1], tail
