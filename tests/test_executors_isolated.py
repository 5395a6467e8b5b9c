"""The Ray and Slurm executor tests, and the Ray test of a login to the tracking server, run where
Ray's traffic cannot leave the machine: one pytest in one network namespace for both files (each
start of one costs a Python with torch and a login server)."""

from __future__ import annotations

import pytest
from network_isolation import loopback_only, run_isolated

pytestmark = pytest.mark.slow  # the Ray and Slurm suite in a network namespace

RAY_LOGIN = "tests/test_tracking_login.py::test_ray_tasks_get_the_login_though_their_head_never_saw_it"


@pytest.mark.skipif(loopback_only(), reason="already isolated: test_executors.py runs directly")
def test_executor_suite_and_the_ray_login_in_a_private_network_namespace():
    result = run_isolated(["-q", "tests/test_executors.py", RAY_LOGIN], timeout_s=1200)
    tail = (result.stdout + result.stderr)[-4000:]
    assert result.returncode == 0, tail
    assert " passed" in result.stdout and " skipped" not in result.stdout.splitlines()[-1], tail
