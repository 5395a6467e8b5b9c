"""Start-up paths that must stay light: run code in a fresh interpreter and check that it
imported none of the heavy modules (torch, mlflow...)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def assert_imports_none_of(code: str, *modules: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a fresh interpreter; fail, showing its stderr, unless it exits 0
    with none of ``modules`` (torch when none are named) imported. Returns the finished process."""
    heavy = modules or ("torch",)
    check = (
        "\nimport sys\n"
        f"_heavy = sorted(m for m in {heavy!r} if m in sys.modules)\n"
        "assert not _heavy, f'imported {_heavy}'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code) + check], capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stderr
    return result
