"""benchmarks/server_load.py runs end to end at a tiny size, into both backends: every cell's
writes are in the store afterwards (nothing failed, spooled or lost), and the figures are there.

Only the plumbing is tested; timings on a shared machine are not. Without PostgreSQL installed
(``apt-get install postgresql``) the PostgreSQL half is skipped here, and fails in CI.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.long_commands import benchmark, run_command

pytestmark = pytest.mark.slow(seconds=90)  # starts two tracking servers and a PostgreSQL cluster


def has_postgres() -> bool:
    return bool(shutil.which("pg_ctl") or glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))


def two_cells_each(folder: Path) -> list[str]:
    return benchmark("server_load", "--cells", "2", "--epochs", "2", "--processes", "2", "--json", "load.json")


@pytest.mark.skipif(
    not has_postgres() and not os.environ.get("CI"), reason="PostgreSQL is not installed (apt-get install postgresql)"
)
def test_two_cells_into_each_backend_land_whole(short_tmp):
    done, out = run_command(two_cells_each(short_tmp), short_tmp), short_tmp / "load.json"
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["machine"]["cores"] > 0
    assert [(load["backend"], load["cells"]) for load in results["loads"]] == [("sqlite", 2), ("postgresql", 2)]
    for load in results["loads"]:
        # A request the server answered too slowly on a busy machine is counted (failed_requests, a
        # figure of the benchmark's table) and sent again by the cell's writer: nothing may be lost.
        assert not load["cells_failed"] and load["cells_completed"] == 2, load
        assert load["runs_not_finished"] == 0 and load["spooled"] == 0 and load["lost"] == 0, load
        # 2 cells x (3 epochs of the per-epoch batch + the summary), all of them stored
        assert load["metric_values_expected"] == load["metric_values_stored"] > 2 * 3
        assert load["writes"] > 2 * 3 and load["writes_per_s"] > 0 and load["write_slowest_s"] > 0
