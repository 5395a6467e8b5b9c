"""Commands that only read a store (report, export, clean) create nothing where there is none, and
name the store they looked in."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.mark.parametrize(
    "args",
    [
        ["report", "foo"],
        ["report", "foo", "--format", "json"],
        ["export", "foo", "--out", "x.json.gz"],
        ["clean", "foo"],
    ],
)
def test_no_store_here_creates_nothing_and_names_where_it_looked(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert list(tmp_path.iterdir()) == []  # no mlflow.db, no lock file, no report folder
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: no tracking store at sqlite:///mlflow.db")
    assert str(tmp_path / "mlflow.db") in line and "--tracking-uri" in line


def test_a_sweep_not_in_the_store_names_the_store(tracking_uri, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["report", "foo", "--tracking-uri", tracking_uri])
    assert result.exit_code == 2
    assert f"looked in {tracking_uri}" in result.stderr or f"the tracking store {tracking_uri}" in result.stderr
