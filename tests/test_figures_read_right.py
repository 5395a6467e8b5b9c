"""Figures that do not mislead (issue 47), each test failing on the drawing before it: runs that
never interpolated drawn in a band of their own with their counts, never at y = 0 (epoch 0);
accuracy intervals within [0, 100] with the chance level drawn; radial and directional memory on
an axis from 0 to 1 with half the initial value drawn; the verdict plot's labels whole and inside
the figure. Read back from the matplotlib Figure's artists, not from pixels."""

from __future__ import annotations

import math
import re

import pytest

from initmem_core.config import RunConfig
from initmem_core.report import plots, verdict_plot
from initmem_core.report.assessment import build_assessed_report, evaluated
from initmem_core.report.memory import build_report
from tests.builders import record, two_optimizers
from tests.test_report_figures import _benchmark, drawn

pytestmark = pytest.mark.slow  # each draws and renders a whole figure (1-3 s)


def cell(opt, sigma, seed, acc, tau=None, **more):
    metrics = {} if tau is None else {"tau_interp": tau}
    return record(RunConfig(opt=opt, sigma=sigma, seed=seed), acc, metrics=metrics, num_classes=10, **more)


def test_runs_that_never_interpolated_are_counted_in_a_band_above_the_epochs(tmp_path, monkeypatch):
    records = [
        cell("sgd", 0.5, 0, 0.9, tau=3.0),
        cell("sgd", 0.5, 1, 0.9, tau=5.0),
        cell("sgd", 2.0, 0, 0.8, tau=4.0),
        cell("sgd", 2.0, 1, 0.7),  # never fit where another seed did: hidden before
        cell("adam", 0.5, 0, 0.9, tau=2.0),
        cell("adam", 0.5, 1, 0.9, tau=2.0),
        cell("adam", 2.0, 0, 0.6),
        cell("adam", 2.0, 1, 0.6),
    ]
    report = build_report(records)
    figure = drawn(report, plots.tau_interp_vs_sigma, tmp_path, monkeypatch)
    (ax,) = figure.axes
    zero = ax.transData.transform((0.0, 0.0))[1]
    never = {c.get_gid(): c for c in ax.collections if (c.get_gid() or "").endswith("|never")}
    assert set(never) == {f"{g.group}|never" for g in report.groups}
    for group in report.groups:
        marks = never[f"{group.group}|never"]
        shown = marks.get_offset_transform().transform(marks.get_offsets())
        assert all(y > zero + 10 for _, y in shown)  # nowhere near epoch 0
        band = ax.transAxes.transform((0.0, 1 - plots.NEVER_BAND))[1]
        assert all(y >= band for _, y in shown)  # above every epoch drawn
        assert min(ax.get_yticks()[ax.get_yticks() <= ax.get_ylim()[1]]) >= 0
        assert max(t for t in ax.get_yticks() if ax.transData.transform((0, t))[1] < band) <= ax.get_ylim()[1]
        sigmas = sorted(round(x, 1) for x, _ in marks.get_offsets())
        assert sigmas == [2.0]
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert any("sgd" in t and "1 of 4 runs never interpolated" in t for t in legend), legend
    assert any("adam" in t and "2 of 4 runs never interpolated" in t for t in legend), legend
    counts = {t.get_text() for t in ax.texts}
    assert {"1/2", "2/2"} <= counts  # at the sigma, how many of its trained seeds


def test_accuracy_intervals_stay_within_0_and_100_and_chance_is_drawn(tmp_path, monkeypatch):
    # three seeds far apart: a t interval of their mean reaches past 100 and below 0
    records = [cell("sgd", s, seed, acc) for s in (0.5, 2.0) for seed, acc in enumerate((0.15, 0.99, 0.99))]
    report = build_report(records)
    row = report.rows[0]
    assert row.test_acc_hi > 100 and row.test_acc_lo < 0  # what the figure must not draw
    figure = drawn(report, plots.accuracy_vs_sigma, tmp_path, monkeypatch)
    (ax,) = figure.axes
    bars = [segment for c in ax.collections for segment in c.get_segments()]
    assert bars
    for segment in bars:
        assert all(0.0 <= y <= 100.0 for _, y in segment), segment
    low, high = ax.get_ylim()
    assert low >= 0.0 and high <= 100.0
    (chance,) = [line for line in ax.get_lines() if line.get_gid() == "chance"]
    assert list(chance.get_ydata()) == [pytest.approx(10.0)] * 2
    assert any("chance (10%)" in t.get_text() for t in figure.legends[0].get_texts())


@pytest.fixture(scope="module")
def forgetting():
    return build_report(_benchmark().synthetic_sweep(0, groups=((0.0, 0.01), (0.0, 0.1)), epochs=6))


@pytest.mark.parametrize("draw", [plots.memory_vs_epoch, plots.memory_vs_clock], ids=lambda d: d.__name__)
def test_memory_axes_run_from_0_to_1_with_half_the_initial_value_drawn(forgetting, draw, tmp_path, monkeypatch):
    figure = drawn(forgetting, draw, tmp_path, monkeypatch)
    checked = 0
    for ax in figure.axes:
        gids = [line.get_gid() or "" for line in ax.get_lines()]
        memory = next((g.split("|")[1] for g in gids if g.count("|") >= 1), None)
        if memory not in ("radial", "directional"):
            continue
        low, high = ax.get_ylim()
        assert low <= 0.0 and high >= 1.0, (memory, low, high)  # a change of 0.3% looks like one
        halves = [line for line in ax.get_lines() if (line.get_gid() or "").endswith("|half")]
        assert halves, memory
        for line in halves:
            group = line.get_gid().split("|")[0]
            half = forgetting.forgetting[group].half_lives[memory]
            assert list(line.get_ydata()) == [pytest.approx(half.initial / 2)] * 2
        checked += 1
    assert checked >= 2


def test_the_verdict_plot_cuts_no_label_and_keeps_every_text_inside(tmp_path, monkeypatch):
    report = build_assessed_report(two_optimizers())
    figures = []
    monkeypatch.setattr(verdict_plot, "save_figure", lambda figure, path: figures.append(figure) or path)
    verdict_plot.verdict_plot(report, tmp_path / "verdicts.png")
    (figure,) = figures
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    labels = [t.get_text() for ax in figure.axes for t in ax.get_yticklabels()]
    assert labels and not any("…" in label for label in labels)
    flat = re.sub(r"\s+", " ", " ".join(labels))
    for finding in evaluated(report.findings):
        if finding.margin:
            assert f"margin: {finding.margin}" in flat, finding.margin  # whole, on as many lines as it takes
        if finding.key is not None:
            assert finding.key.label in flat
    box = figure.bbox
    texts = [t for ax in figure.axes for t in (*ax.texts, *ax.get_yticklabels()) if t.get_text()]
    for text in texts:
        extent = text.get_window_extent(renderer)
        assert extent.x0 >= box.x0 - 1 and extent.x1 <= box.x1 + 1, text.get_text()
        assert not math.isnan(extent.x0)
