"""A run you can watch: one line per epoch (on a terminal, or with --progress lines), and
`initmem report RUN_ID` for a run that is not a sweep."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_cli.progress import RunProgress, epoch_line

runner = CliRunner(env={"COLUMNS": "200"})
TINY = ["--epochs", "2", "--train-size", "64", "--batch-size", "32", "--eval-size", "100", "--threads", "1"]
FIGURES = {
    "train_loss": 0.4123,
    "train_acc": 0.881,
    "val_acc": 0.85,
    "test_acc": 0.842,
    "clock_sgd": 0.0123,
    "clock_l2": 0.0,
    "clock_adapt": 1.5,
}


def test_an_epoch_line_has_the_loss_the_accuracies_and_the_clocks():
    line = epoch_line(3, 10, FIGURES, 4.21)
    assert line == (
        "epoch 3/10  loss 0.4123  train 88.1%  val 85.0%  test 84.2%  T_SGD 0.0123  T_L2 0  T_adapt 1.5  (4.2 s)"
    )
    assert epoch_line(1, 2, {"train_loss": 1.0}).endswith("test –")  # --eval-every: figures not measured


@pytest.mark.parametrize(("terminal", "mode", "lines"), [(True, "auto", 1), (False, "auto", 0), (False, "lines", 1)])
def test_lines_on_a_terminal_or_when_asked(terminal, mode, lines):
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200)
    with RunProgress(console, label="r", mode=mode) as progress:
        progress.start(2, 1)
        progress.advance(1)
        progress.epoch_done(1, FIGURES)
    assert out.getvalue().count("epoch 1/2  loss 0.4123") == lines


@pytest.mark.slow(seconds=25)  # trains twice
def test_a_single_run_prints_its_epochs_and_reports_by_its_id(tracking_uri, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    watched = runner.invoke(app, ["run", *TINY, "--progress", "lines", "--json", "--tracking-uri", tracking_uri])
    assert watched.exit_code == 0, watched.output
    assert "epoch 1/2  loss " in watched.stderr and "epoch 2/2  loss " in watched.stderr
    run_id = json.loads(watched.stdout)["run_id"]

    report = runner.invoke(app, ["report", run_id, "--format", "json", "--tracking-uri", tracking_uri])
    assert report.exit_code == 0, report.output
    document = json.loads(report.stdout)
    assert document["run_id"] == run_id and document["status"] == "FINISHED"
    assert [row["epoch"] for row in document["epochs"]] == [0, 1, 2]
    assert {"train_loss", "val_acc", "test_acc", "clock_sgd"} <= set(document["epochs"][-1])
    assert "best_val_test_acc" in document["summary"]

    table = runner.invoke(app, ["report", run_id, "--tracking-uri", tracking_uri])
    assert table.exit_code == 0 and "per epoch" in table.stdout and "T_adapt" in table.stdout

    unknown = runner.invoke(app, ["report", "0" * 32, "--tracking-uri", tracking_uri])
    assert unknown.exit_code == 2 and "no sweep '" + "0" * 32 + "'" in unknown.stderr

    piped = runner.invoke(app, ["run", *TINY, "--seed", "1", "--no-tracking"])  # not a terminal: no lines
    assert piped.exit_code == 0 and "epoch 1/2  loss " not in piped.output


def test_report_with_no_argument_says_what_to_give():
    result = runner.invoke(app, ["report"])
    assert result.exit_code == 2
    assert "give a sweep name or parent run id" in result.stderr and "not both" not in result.stderr
