"""Verdicts (report/verdicts.py) and how the report shows them: the decision rule (reproduced only when
the interval of the difference excludes zero in the claimed direction, at the Bonferroni level), and
``initmem report`` showing every claim that applies with its key interval, margin and verdict in
Markdown, JSON, the parent run's description and one tag per claim; claims left out say what groups
they would need."""

from __future__ import annotations

import json
import math

import pytest

from initmem_core.report.assessment import build_assessed_report, evaluated, verdict_tags
from initmem_core.report.description import description
from initmem_core.report.render import interval, to_json, to_markdown
from initmem_core.report.verdicts import (
    CONTRADICTED,
    NOT_EVALUATED,
    NOT_RESOLVED,
    REPRODUCED,
    VERDICTS,
    bonferroni_level,
    decide,
)
from initmem_core.vocabulary import VERDICT_TAG_PREFIX, verdict_tag
from initmem_plugins.claims.declared import STATEMENTS
from tests.support.builders import two_optimizers


def test_decide_by_hand():
    assert decide([(0.5, 3.0), (0.1, 1.0)]) == REPRODUCED
    assert decide([(0.5, 3.0), (-1.0, 1.0)]) == NOT_RESOLVED
    assert decide([(0.5, 3.0), (-2.0, -0.1)]) == CONTRADICTED
    assert decide([(math.nan, math.nan)]) == NOT_RESOLVED
    assert decide([]) == NOT_RESOLVED
    # Contradicted by one of k comparisons only at the Bonferroni level: the wider interval decides.
    assert decide([(0.5, 3.0), (-2.0, -0.1)], against=[(0.3, 3.2), (-2.3, 0.2)]) == NOT_RESOLVED
    assert bonferroni_level(3) == pytest.approx(1 - 0.05 / 3) and bonferroni_level(1) == pytest.approx(0.95)


def test_the_report_carries_every_claim_and_decides_the_ones_its_groups_allow():
    report = build_assessed_report(two_optimizers())
    names = [f.name for f in report.findings]
    assert names == list(STATEMENTS)
    decided = {f.name: f.verdict for f in evaluated(report.findings)}
    assert decided["sgd_remembers_more_than_adaptive"] == REPRODUCED
    assert decided["adaptive_optimizers_forget"] == REPRODUCED
    assert "l2_shrinks_sgd_spread" not in decided  # no L2 group: not evaluated, and says what it needs
    left = {f.name: f for f in report.findings if f.verdict == NOT_EVALUATED}
    assert "L2" in left["l2_shrinks_sgd_spread"].needs


def test_markdown_shows_each_claims_key_interval_margin_and_verdict_and_what_the_rest_would_need():
    report = build_assessed_report(two_optimizers())
    text = to_markdown(report)
    assert "## Claims on this sweep" in text
    section = text.split("## Claims on this sweep", 1)[1].split("\n## ", 1)[0]
    found = {f.name: f for f in report.findings}
    forgets = found["adaptive_optimizers_forget"]
    row = next(line for line in section.splitlines() if line.startswith("| `adaptive_optimizers_forget` (claims):"))
    key = forgets.key
    assert key is not None
    assert f"{key.estimate:+.2f} pp {interval(key.lo, key.hi)}" in row
    assert f"| {REPRODUCED} |" in row and "25%" in row  # the margin is named
    assert "Not evaluated on this sweep" in section
    needs = next(line for line in section.splitlines() if line.startswith("- `l2_shrinks_sgd_spread`"))
    assert found["l2_shrinks_sgd_spread"].needs in needs


def test_json_findings_hold_the_key_quantity_parts_and_needs():
    # three architectures: per-stratum parts
    cells = sum((two_optimizers(arch=arch) for arch in ("resnet20", "resnet32")), [])
    report = build_assessed_report(cells)
    data = json.loads(to_json(report))["findings"]
    assert [f["name"] for f in data] == [f.name for f in report.findings]
    by_name = {f["name"]: f for f in data}
    first = next(f for f in report.findings if f.name == "sgd_remembers_more_than_adaptive")
    shown = by_name["sgd_remembers_more_than_adaptive"]
    assert shown["verdict"] == first.verdict == REPRODUCED
    assert first.key is not None
    assert (shown["key"]["estimate"], shown["key"]["lo"], shown["key"]["hi"]) == (
        first.key.estimate,
        first.key.lo,
        first.key.hi,
    )
    assert [p["stratum"] for p in shown["parts"]] == ["arch=resnet20", "arch=resnet32"]
    assert [p["verdict"] for p in shown["parts"]] == [p.verdict for p in first.parts]
    assert by_name["l2_shrinks_sgd_spread"]["verdict"] == NOT_EVALUATED and by_name["l2_shrinks_sgd_spread"]["needs"]


def test_the_parent_run_gets_a_verdict_tag_per_claim_and_the_claims_in_its_description():
    report = build_assessed_report(two_optimizers())
    tags = verdict_tags(report.findings)
    assert set(tags) == {verdict_tag(name) for name in STATEMENTS}
    assert all(key.startswith(VERDICT_TAG_PREFIX) for key in tags) and set(tags.values()) <= set(VERDICTS)
    assert tags[verdict_tag("sgd_remembers_more_than_adaptive")] == REPRODUCED
    note = description(report, "mine", "1", "abc", "view")
    assert "**Claims on this sweep**, each with its plugin" in note
    assert f"| `sgd_remembers_more_than_adaptive` (claims) | {REPRODUCED} |" in note
    assert "`l2_shrinks_sgd_spread`:" in note  # not evaluated, with what it needs


def test_a_sweep_that_decides_nothing_says_what_each_claim_would_need():
    only_adam = [r for r in two_optimizers() if r.config.opt != "sgd"]
    report = build_assessed_report(only_adam)
    assert not evaluated(report.findings)
    text = to_markdown(report)
    assert "No claim could be evaluated on this sweep's groups." in text
    assert all(f"- `{name}`" in text for name in STATEMENTS)


def test_the_terminal_report_has_a_table_of_the_claims():
    from rich.console import Console

    from initmem_cli.report import rich_tables

    report = build_assessed_report(two_optimizers())
    console = Console(width=160, record=True)
    console.print(*rich_tables(report, "mine", 160))
    shown = console.export_text()
    assert "claims on this sweep" in shown and "sgd_remembers_more_than_adaptive (claims)" in shown
    assert "sgd_remembers_more_than_adaptive" in shown and REPRODUCED in shown


# -- verdicts.png --------------------------------------------------------------------------------


def drawn_rows(figure):
    """Per gid: (estimate, lo, hi) of each row's error bar, the verdict written beside it, and the y tick label."""
    rows = {}
    for ax in figure.axes:
        labels = {tick.get_position()[1]: tick.get_text() for tick in ax.get_yticklabels()}
        texts = {t.get_gid(): t.get_text() for t in ax.texts}
        for container in ax.containers:
            line = container.lines[0]
            (x,), (y,) = line.get_xdata(), line.get_ydata()
            (start, end), *_ = container.lines[2][0].get_segments()
            rows[line.get_gid()] = (x, start[0], end[0], texts[line.get_gid()], labels[y], ax)
    return rows


def test_the_forest_plot_draws_each_claims_key_interval_and_verdict(tmp_path, monkeypatch):
    from initmem_plugins.figures import verdicts as module
    from initmem_plugins.figures.verdicts import verdict_plot

    cells = sum((two_optimizers(arch=arch) for arch in ("resnet20", "resnet32")), [])
    report = build_assessed_report(cells)
    path = verdict_plot(report, tmp_path / "verdicts.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    drawn = []
    monkeypatch.setattr(module, "save_figure", lambda figure, path: drawn.append(figure) or path)
    verdict_plot(report, tmp_path / "again.png")
    rows = drawn_rows(drawn[0])
    expected = {}
    for f in evaluated(report.findings):
        if f.key is not None and f.key.decided:
            expected[f.name] = (f.key, f.verdict, f)
        for part in f.parts:
            if part.key is not None and part.key.decided:
                expected[f"{f.name} [{part.stratum}]"] = (part.key, part.verdict, part)
    assert set(rows) == set(expected) and len(rows) >= 6  # every claim and every stratum that has an interval
    for gid, (key, verdict, finding) in expected.items():
        x, lo, hi, text, label, ax = rows[gid]
        assert (x, lo, hi) == (
            pytest.approx(key.estimate),
            pytest.approx(key.lo),
            pytest.approx(key.hi),
        )
        assert text == verdict
        assert key.label[:30] in label
        if finding.margin and not finding.stratum:
            assert "margin:" in label  # the margin is named in the row's label
        assert any(line.get_xdata()[0] == 0 for line in ax.lines if line.get_linestyle() == "-")  # zero line


def test_the_report_folder_and_plot_list_hold_verdicts_png(tmp_path):
    from initmem_core.report.figures import figure_files
    from initmem_core.report.files import write_report_files

    written = {p.name for p in write_report_files(build_assessed_report(two_optimizers()), tmp_path)}
    assert "verdicts.png" in written and set(figure_files()) <= written
