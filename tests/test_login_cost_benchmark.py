"""benchmarks/login_cost.py runs end to end at a tiny size: a login server starts, the user's
requests are timed against werkzeug's scrypt hash and then against the one-round hash the tests
give their users, and the figures are written. Only the plumbing is tested, not the timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.long_commands import benchmark, run_command

pytestmark = pytest.mark.slow(seconds=45)  # starts a tracking server with MLflow's login


def two_requests_each(folder: Path) -> list[str]:
    return benchmark("login_cost", "--requests", "2", "--json", "cost.json")


def test_both_hashes_are_timed_against_the_hash_they_name(short_tmp):
    done = run_command(two_requests_each(short_tmp), short_tmp)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    figures = json.loads((short_tmp / "cost.json").read_text())
    assert figures["requests"] == 2 and figures["machine"]
    scrypt, pbkdf2 = figures["results"]["scrypt (werkzeug's default)"], figures["results"]["one round of PBKDF2"]
    assert scrypt["hash_method"].startswith("scrypt:") and pbkdf2["hash_method"] == "pbkdf2:sha256:1"
    for side in (scrypt, pbkdf2):
        assert 0 < side["min_s"] <= side["median_s"] <= side["max_s"]
    assert "| one round of PBKDF2 |" in done.stdout
