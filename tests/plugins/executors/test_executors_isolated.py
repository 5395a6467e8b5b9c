"""The Ray and Slurm executor tests, the Ray test of a login to the tracking server and the Ray
lockstep sweep, run where Ray's traffic cannot leave the machine: one pytest in one network
namespace for the three files (each start of one costs a Python with torch and a server)."""

from __future__ import annotations

import pytest

from tests.support import ROOT
from tests.support.long_commands import nested_pytest, run_command
from tests.support.network_isolation import isolated, loopback_only

EXECUTORS = ROOT / "tests" / "plugins" / "executors" / "test_executors.py"
LOGIN = ROOT / "tests" / "core" / "tracking" / "test_login.py"
RAY_LOGIN_TEST = "test_ray_tasks_get_the_login_though_their_head_never_saw_it"
LOCKSTEP = ROOT / "tests" / "plugins" / "executors" / "test_lockstep_remote.py"
RAY_LOCKSTEP_TEST = "test_a_ray_lockstep_sweep_is_the_local_fused_sweep_and_its_killed_worker_is_run_again"


@pytest.mark.slow(seconds=460)  # the Ray and Slurm suite in a network namespace
@pytest.mark.skipif(loopback_only(), reason="already isolated: test_executors.py runs directly")
def test_executor_suite_and_the_ray_login_in_a_private_network_namespace(short_tmp):
    tests = (f"{LOGIN}::{RAY_LOGIN_TEST}", f"{LOCKSTEP}::{RAY_LOCKSTEP_TEST}")
    command = isolated(nested_pytest(short_tmp, str(EXECUTORS), *tests))
    done = run_command(command, short_tmp, timeout_s=1200)
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and " skipped" not in done.stdout.splitlines()[-1], tail


def test_the_files_and_the_test_it_runs_are_where_it_names_them():
    """The nested pytest names its files by path: a file moved or a test renamed fails here, on
    every machine, not only where a network namespace can be made."""
    assert EXECUTORS.is_file() and LOGIN.is_file() and LOCKSTEP.is_file()
    assert f"def {RAY_LOGIN_TEST}(" in LOGIN.read_text()
    assert f"def {RAY_LOCKSTEP_TEST}(" in LOCKSTEP.read_text()
