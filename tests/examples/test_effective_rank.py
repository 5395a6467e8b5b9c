"""The effective-rank example installs with pip and its metric is logged by `initmem run --metric`."""

from __future__ import annotations

import pytest

from tests.support import ROOT
from tests.support.cli_processes import history, only_run

pytestmark = pytest.mark.slow  # pip-installs the example package and runs it

EXAMPLE = ROOT / "examples" / "initmem-effective-rank"


def test_initmem_run_logs_the_effective_rank(installed_example, initmem_subprocess, tracking_uri, tmp_path):
    result = initmem_subprocess(
        installed_example,
        "run",
        "--metric",
        "effective-rank",
        "--epochs",
        "1",
        "--train-size",
        "64",
        "--batch-size",
        "32",
        "--threads",
        "1",
        "--tracking-uri",
        tracking_uri,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    run = only_run(tracking_uri)
    assert run.data.params["metrics"] == "effective-rank"
    ratio = dict(history(tracking_uri, run.info.run_id, "effective_rank_ratio"))
    assert ratio[0] == pytest.approx(1.0)  # W is W0 at the initialization
    [(step, value)] = history(tracking_uri, run.info.run_id, "update_effective_rank")
    assert step == 1 and 0 < value <= 1


def test_the_example_package_own_tests_pass(installed_example, package_tests_subprocess):
    result = package_tests_subprocess(installed_example, EXAMPLE / "tests")
    assert result.returncode == 0, result.stdout + result.stderr
