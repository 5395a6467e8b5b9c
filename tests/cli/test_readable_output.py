"""What a person reads in a log or in ``--help``: a listing piped to a file wraps at a readable width
instead of padding each row to the widest a log console allows, every command's summary in
``initmem --help`` is one whole sentence, and neither the help nor a preset cites the tracker's
issue numbers (a reader of the tool has no access to them)."""

from __future__ import annotations

import os
import re
import subprocess

import typer
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_cli.options import summary
from initmem_cli.tables import READABLE_WIDTH
from tests.support import ROOT
from tests.support.cli_processes import initmem_command

PRESETS = ROOT / "plugins" / "claims" / "presets"
#: "issue 46", "issues 36-40", "#29": a citation of the project's tracker.
ISSUE = re.compile(r"\bissues? \d+|(?<![\w&/])#\d+\b", re.IGNORECASE)
runner = CliRunner()


def test_presets_written_to_a_file_wrap_at_a_readable_width(tmp_path):
    # os.environ as given (readline, once loaded, exports COLUMNS to subprocesses behind its back)
    env = {name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES")}
    listing = tmp_path / "presets.txt"
    with listing.open("w") as out:  # a file, as `initmem presets > presets.txt`
        done = subprocess.run(
            initmem_command("presets"), stdout=out, stderr=subprocess.PIPE, text=True, timeout=120, env=env
        )
    assert done.returncode == 0, done.stderr
    lines = listing.read_text().splitlines()
    assert "paper-mini" in listing.read_text() and max(len(line) for line in lines) <= 200
    assert max(len(line) for line in lines) == READABLE_WIDTH  # the description column takes the room


def test_the_plugins_table_in_a_pipe_wraps_at_a_readable_width(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    result = runner.invoke(app, ["plugins"])  # CliRunner's output is not a terminal
    assert result.exit_code == 0, result.output
    assert "resnet9" in result.stdout and max(len(line) for line in result.stdout.splitlines()) <= READABLE_WIDTH


def test_a_summary_is_the_first_paragraph_as_one_sentence():
    assert summary("List every kind, claim,\n    preset and figure\n\nMore detail.") == (
        "List every kind, claim, preset and figure."
    )
    assert summary("Done already.") == "Done already." and summary(None) == ""


def test_every_command_summary_in_help_is_one_sentence():
    group = typer.main.get_command(app)
    ctx = group.make_context("initmem", [], resilient_parsing=True)
    names = group.list_commands(ctx)
    assert {"run", "sweep", "plugins", "presets", "clean", "new-plugin"} <= set(names)
    for name in names:
        text = group.get_command(ctx, name).get_short_help_str(limit=10_000)
        assert "\n" not in text and text.endswith("."), (name, text)
    shown = runner.invoke(app, ["--help"], env={"COLUMNS": "300"}).stdout
    panel = shown.split("Commands")[1].split("╰")[0]
    rows = [line for line in panel.splitlines() if line.startswith("│")]
    assert len(rows) == len(names)  # one line each: no summary broken onto a second


def test_no_help_text_or_preset_cites_an_issue_number():
    group = typer.main.get_command(app)
    ctx = group.make_context("initmem", [], resilient_parsing=True)
    helps = {"initmem": runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout}
    for name in group.list_commands(ctx):
        helps[name] = runner.invoke(app, [name, "--help"], env={"COLUMNS": "200"}).stdout
    presets = {path.name: path.read_text() for path in PRESETS.glob("*.toml")}
    assert len(presets) > 10 and all(helps.values())
    citing = {where: ISSUE.findall(text) for where, text in {**helps, **presets}.items() if ISSUE.search(text)}
    assert citing == {}
    assert ISSUE.findall("see issue 46, issues 36-40 and #29; not #fff or a&#39;") == ["issue 46", "issues 36", "#29"]
