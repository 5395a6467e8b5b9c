"""Tables that read in a terminal and in a log: piped to a file no word is broken, the
claims are one table whatever the width, and a sweep's closing table says what a group without a
spread did (did not train, no run ended) instead of a dash."""

from __future__ import annotations

import io

from rich.console import Console

from initmem_cli.report import rich_tables
from initmem_cli.sweep import groups_table, verdicts_table
from initmem_cli.tables import LOG_WIDTH, output_console, word_widths
from initmem_core.config import RunConfig
from initmem_core.report.assessment import build_assessed_report, evaluated
from initmem_core.report.memory import build_report
from initmem_core.vocabulary import FAILED
from tests.support.builders import record, two_optimizers

LONG = dict(epochs=2, train_size=256, batch_size=32)  # constants of the sweep: long group labels


def two_groups(**more):
    return [
        record(RunConfig(opt=opt, lr=lr, sigma=sigma, seed=seed, **LONG, **more), acc)
        for opt, lr in (("sgd", 0.05), ("adam", 0.001))
        for sigma, seed, acc in ((0.5, 0, 0.80), (0.5, 1, 0.84), (2.0, 0, 0.60), (2.0, 1, 0.71))
    ]


def printed(console: Console, *tables) -> str:
    console.print(*tables)
    return console.export_text()


def test_a_console_that_is_not_a_terminal_is_as_wide_as_a_table_needs(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    piped = output_console(file=io.StringIO(), record=True)
    assert piped.width == LOG_WIDTH
    text = printed(piped, groups_table(build_assessed_report(two_groups()), piped.width))
    rows = [line for line in text.splitlines() if "/" in line]  # runs fit, "2/2"
    assert {row.split("│")[1].strip() for row in rows} == {"adam,lr=0.001", "sgd,lr=0.05"}  # whole
    monkeypatch.setenv("COLUMNS", "90")  # set by hand: it wins
    assert output_console(file=io.StringIO()).width == 90


def test_a_terminal_with_room_for_every_word_breaks_none():
    report = build_assessed_report(two_groups())
    console = Console(width=100, record=True, file=io.StringIO())
    text = printed(console, groups_table(report, 100))
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "adam,lr=0.001" in text and "sgd,lr=0.05" in text  # not folded mid-label
    headers, rows = ["a", "b"], [["one two three four", "x" * 30]]
    assert word_widths(headers, rows, 200) is None  # fits as it is: rich lays it out
    widths = word_widths(headers, rows, 45)
    assert widths is not None and widths[1] >= 30 and sum(widths) <= 45 - 7


def test_the_claims_are_one_table_at_80_columns_each_claim_beside_its_verdict():
    report = build_assessed_report(two_optimizers())
    tables = rich_tables(report, "mine", 80)
    claims = [t for t in tables if "claims" in str(t.title)]
    assert len(claims) == 1 and not any("(continued)" in str(t.title) for t in tables if "claims" in str(t.title))
    text = printed(Console(width=80, record=True, file=io.StringIO()), *claims)
    assert max(len(line) for line in text.splitlines()) <= 80
    for finding in evaluated(report.findings):
        first = next(line for line in text.splitlines() if finding.name[:20] in line)
        assert finding.verdict_text.split()[0] in first, (finding.name, first)  # on the row's first line


def test_a_group_that_did_not_train_or_never_ended_says_so_in_the_closing_table():
    at_chance = [
        record(RunConfig(opt="timm:lion", sigma=s, seed=0), acc, num_classes=10) for s, acc in ((0.5, 0.11), (2, 0.09))
    ]
    failed = [record(RunConfig(opt="adamw", sigma=s, seed=0), None, fit=None, status=FAILED) for s in (0.5, 2.0)]
    trained = [record(RunConfig(opt="sgd", sigma=s, seed=0), acc, num_classes=10) for s, acc in ((0.5, 0.8), (2, 0.6))]
    report = build_report(at_chance + failed + trained)
    text = printed(Console(width=400, record=True, file=io.StringIO()), groups_table(report, 400))
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│")}
    assert "did not train (best 11.0%)" in rows["timm:lion"]
    assert "no run ended (2 failed)" in rows["adamw"]
    assert "20.00" in rows["sgd"]


def test_the_sweeps_closing_verdicts_keep_a_long_verdict_whole_in_a_log():
    report = build_assessed_report(two_optimizers())
    piped = Console(width=LOG_WIDTH, record=True, file=io.StringIO())
    text = printed(piped, verdicts_table(report, LOG_WIDTH))
    for finding in evaluated(report.findings):
        assert any(finding.name in line and finding.verdict_text in line for line in text.splitlines())
