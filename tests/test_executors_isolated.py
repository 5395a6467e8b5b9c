"""The Ray and Slurm executor tests, run where Ray's traffic cannot leave the machine."""

from __future__ import annotations

import pytest
from network_isolation import loopback_only, run_isolated

pytestmark = pytest.mark.slow  # the Ray and Slurm suite in a network namespace


@pytest.mark.skipif(loopback_only(), reason="already isolated: test_executors.py runs directly")
def test_executor_suite_in_a_private_network_namespace():
    result = run_isolated(["-q", "tests/test_executors.py"], timeout_s=900)
    tail = (result.stdout + result.stderr)[-4000:]
    assert result.returncode == 0, tail
    assert " passed" in result.stdout and " skipped" not in result.stdout.splitlines()[-1], tail
