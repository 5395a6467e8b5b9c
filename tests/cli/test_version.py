"""`initmem --version`: initmem's version, those of torch, mlflow, timm and pluggy, and the device a
run would use, in two lines, before (and instead of) any command."""

from __future__ import annotations

import platform
from importlib import metadata

from typer.testing import CliRunner

from initmem_cli.app import app

runner = CliRunner()


def test_version_prints_the_versions_and_the_device_a_run_would_use():
    from initmem_core.training.setup import resolve_device

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    first, second = result.stdout.splitlines()
    assert first == f"initmem {metadata.version('initmem')} (Python {platform.python_version()})"
    for package in ("torch", "mlflow", "timm", "pluggy"):
        assert f"{package} {metadata.version(package)}" in second
    assert second.endswith(f"; device: {resolve_device('auto').type}") or "device: cuda (" in second


def test_version_comes_before_any_command_and_runs_none():
    result = runner.invoke(app, ["--version", "sweep", "--sigma", "not-a-number"])
    assert result.exit_code == 0 and result.stdout.startswith("initmem ") and "sigma" not in result.output
