"""The report's figures (the plugin `figures`: plots.py, verdicts.py) read at a glance and draw what the
report says: a panel only for each clock that moved, tick labels that never overlap, the epoch-0 point
apart from a log clock axis, legends naming only what varies with the debiased spread and its
interval, one colour per group in every figure. And they do not mislead, each test failing on the
drawing before it: runs that never interpolated drawn in a band of their own with their counts, never
at y = 0 (epoch 0); accuracy intervals within [0, 100] with the chance level drawn; radial and
directional memory on an axis from 0 to 1 with half the initial value drawn; the verdict plot's labels
whole and inside the figure. Each figure's drawn data is read back from its artists, not from pixels."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from types import SimpleNamespace

import pytest

from initmem_core.config import RunConfig
from initmem_core.groups import group_keys
from initmem_core.report.assessment import build_assessed_report, evaluated
from initmem_core.report.memory import build_report
from initmem_core.vocabulary import CLOCK_FORMULAS, CLOCK_L2, CLOCKS
from initmem_plugins.claims import forgetting_sweeps
from initmem_plugins.figures import plots, verdicts
from tests.support.builders import clocks, record, two_optimizers

pytestmark = pytest.mark.slow  # each test draws and renders whole figures (1-5 s each)


@pytest.fixture(scope="module")
def no_l2():
    """Two plain-SGD groups a decade of learning rate apart, no L2: T_L2 never moves, T_SGD spans
    two decades (a log axis)."""
    return build_report(forgetting_sweeps.synthetic_sweep(0, groups=((0.0, 0.01), (0.0, 0.1)), epochs=6))


@pytest.fixture(scope="module")
def with_l2():
    return build_report(forgetting_sweeps.synthetic_sweep(0, groups=((0.01, 0.05), (0.02, 0.05)), epochs=6))


def drawn(report, draw, tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda figure, path: figures.append(figure) or path)
    draw(report, tmp_path / "figure.png")
    figure = figures[0]
    figure.canvas.draw()
    return figure


def lines_by_gid(figure):
    """Each gid's first line (an error bar's data line comes before its caps, which share its gid)."""
    found = {}
    for ax in figure.axes:
        for line in ax.get_lines():
            if line.get_gid():
                found.setdefault(line.get_gid(), line)
    return found


ALL = [
    plots.accuracy_vs_sigma,
    plots.weight_norm_curves,
    plots.spread_vs_clocks,
    plots.tau_interp_vs_sigma,
    plots.memory_vs_epoch,
    plots.memory_vs_clock,
]


@pytest.mark.parametrize("draw", ALL, ids=lambda d: d.__name__)
def test_no_tick_labels_overlap(no_l2, draw, tmp_path, monkeypatch):
    figure = drawn(no_l2, draw, tmp_path, monkeypatch)
    renderer = figure.canvas.get_renderer()
    for ax in figure.axes:
        if not ax.get_visible():
            continue
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            boxes = [t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text()]
            for a, b in itertools.combinations(boxes, 2):
                assert not a.overlaps(b), (draw.__name__, [t.get_text() for t in labels])


@pytest.mark.parametrize("draw", [plots.spread_vs_clocks, plots.memory_vs_clock], ids=lambda d: d.__name__)
def test_clock_panels_only_for_clocks_that_moved(no_l2, with_l2, draw, tmp_path, monkeypatch):
    figure = drawn(no_l2, draw, tmp_path, monkeypatch)
    labels = [ax.get_xlabel() for ax in figure.axes]
    assert not any(CLOCK_FORMULAS[CLOCK_L2] in label for label in labels)  # no group has L2
    assert all(ax.get_lines() for ax in figure.axes)  # no empty panel
    figure = drawn(with_l2, draw, tmp_path, monkeypatch)
    assert any(CLOCK_FORMULAS[CLOCK_L2] in ax.get_xlabel() for ax in figure.axes)


def test_the_epoch_zero_point_stands_apart_from_a_log_clock_axis(no_l2, tmp_path, monkeypatch):
    figure = drawn(no_l2, plots.memory_vs_clock, tmp_path, monkeypatch)
    logs = [ax for ax in figure.axes if ax.get_xscale() == "log"]
    assert logs and all(ax.get_xscale() in ("log", "linear") for ax in figure.axes)  # no symlog
    for ax in logs:
        curves = [
            line for line in ax.get_lines() if line.get_gid() and not line.get_gid().endswith(("epoch0", "|half"))
        ]
        starts = [line for line in ax.get_lines() if (line.get_gid() or "").endswith("epoch0")]
        assert curves and starts
        assert all(min(line.get_xdata()) > 0 for line in curves)  # no segment from clock 0 across decades
        for start in starts:
            group, memory, _ = start.get_gid().split("|")[:3]
            first = next(p for p in no_l2.forgetting[group].curves[memory] if p.epoch == 0)
            assert list(start.get_ydata()) == [pytest.approx(first.value)] and list(start.get_xdata()) == [0.0]


def test_the_accuracy_figure_draws_the_report_and_its_legend_names_what_varies_with_the_debiased_spread(
    no_l2, tmp_path, monkeypatch
):
    figure = drawn(no_l2, plots.accuracy_vs_sigma, tmp_path, monkeypatch)
    lines = lines_by_gid(figure)
    for group in no_l2.groups:
        rows = [r for r in no_l2.rows if r.group == group.group]
        assert list(lines[group.group].get_xdata()) == pytest.approx([r.sigma for r in rows], abs=0.1)  # dodged
        assert list(lines[group.group].get_ydata()) == pytest.approx([r.test_acc for r in rows])
    legend = figure.legends[0]
    texts = [t.get_text() for t in legend.get_texts() if not t.get_text().startswith("chance")]
    assert [t.split(" (")[0] for t in texts] == ["lr=0.01", "lr=0.1"]  # only the field that varies
    assert legend.get_title().get_text() == "every group: opt=sgd, epochs=6"
    for group, text in zip(no_l2.groups, texts):
        shown = f"debiased spread {group.debiased_spread:+.1f} pp [{group.debiased_spread_lo:+.1f}, "
        assert shown in text and "(spread " not in text  # not the biased max − min


def test_the_norm_figure_draws_every_trained_cells_curve(no_l2, tmp_path, monkeypatch):
    lines = lines_by_gid(drawn(no_l2, plots.weight_norm_curves, tmp_path, monkeypatch))
    expected = {
        f"{group}|{sigma:g}|{seed}": curve
        for group, curves in no_l2.norm_curves.items()
        for sigma, seed, curve in curves
    }
    assert set(lines) == set(expected)
    for gid, curve in expected.items():
        assert list(lines[gid].get_ydata()) == pytest.approx([value for _, value in curve])


def test_the_clock_figure_draws_each_groups_clocks_and_debiased_spread(with_l2, tmp_path, monkeypatch):
    figure = drawn(with_l2, plots.spread_vs_clocks, tmp_path, monkeypatch)
    for ax in figure.axes:
        clock = next(c for c in CLOCKS if CLOCK_FORMULAS[c] == ax.get_xlabel())
        points = {}
        for line in ax.get_lines():
            points.setdefault(line.get_gid(), line)
        for group in with_l2.groups:
            assert list(points[group.group].get_xdata()) == [pytest.approx(getattr(group, clock))]
            assert list(points[group.group].get_ydata()) == [pytest.approx(group.debiased_spread)]


def test_the_interpolation_figure_draws_tau_interp(no_l2, tmp_path, monkeypatch):
    lines = lines_by_gid(drawn(no_l2, plots.tau_interp_vs_sigma, tmp_path, monkeypatch))
    for group in no_l2.groups:
        rows = [r for r in no_l2.rows if r.group == group.group and not math.isnan(r.tau_interp)]
        assert list(lines[group.group].get_ydata()) == pytest.approx([r.tau_interp for r in rows])


@pytest.mark.parametrize("draw", [plots.memory_vs_epoch, plots.memory_vs_clock], ids=lambda d: d.__name__)
def test_the_memory_figures_draw_the_report_s_curves(with_l2, draw, tmp_path, monkeypatch):
    lines = lines_by_gid(drawn(with_l2, draw, tmp_path, monkeypatch))
    curves = [line for gid, line in lines.items() if not gid.endswith(("epoch0", "|half"))]
    assert curves
    for line in curves:
        group, memory, *clock = line.get_gid().split("|")
        points = [p for p in with_l2.forgetting[group].curves[memory] if not math.isnan(p.value)]
        xs = [getattr(p, clock[0]) if clock else p.epoch for p in points]
        if clock and min(line.get_xdata()) > 0:  # a log clock axis: clock 0 is drawn apart
            points, xs = [p for p, x in zip(points, xs) if x > 0], [x for x in xs if x > 0]
        shown = points
        assert list(line.get_xdata()) == pytest.approx(xs)
        assert list(line.get_ydata()) == pytest.approx([p.value for p in shown])


def test_every_figure_gives_a_group_the_same_colour(no_l2, tmp_path, monkeypatch):
    colours = plots.group_colours(no_l2)
    for draw in (plots.accuracy_vs_sigma, plots.spread_vs_clocks, plots.tau_interp_vs_sigma):
        lines = lines_by_gid(drawn(no_l2, draw, tmp_path, monkeypatch))
        for group in no_l2.groups:
            from matplotlib.colors import to_rgba

            assert to_rgba(lines[group.group].get_color()) == to_rgba(colours[group.group])


def test_a_group_at_the_default_of_the_varying_field_is_named_by_that_default():
    from initmem_core.groups import short_labels

    keys = ["opt=sgd,lr=0.01,epochs=15", "opt=sgd,lr=0.01,epochs=15,lr_match_sigma=1"]
    names, shared = short_labels(keys)
    assert names == dict(zip(keys, ["lr_match_sigma=default", "lr_match_sigma=1"]))
    assert shared == "opt=sgd, lr=0.01, epochs=15"
    # a legend names each group by the report's label, the shared settings in its title
    report = SimpleNamespace(groups=[SimpleNamespace(group=k, label=names[k]) for k in keys], shared=shared)
    assert plots.legend_names(report) == (names, shared)


# Figures that do not mislead.


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
    # the t interval of the mean reaches past 100 and below 0: the tables clip it as the figure does
    assert (row.test_acc_lo, row.test_acc_hi) == (0.0, 100.0)
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
    return build_report(forgetting_sweeps.synthetic_sweep(0, groups=((0.0, 0.01), (0.0, 0.1)), epochs=6))


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
    monkeypatch.setattr(verdicts, "save_figure", lambda figure, path: figures.append(figure) or path)
    verdicts.verdict_plot(report, tmp_path / "verdicts.png")
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


def edge_cell(opt, sigma, seed, acc, tau=None, lr=None):
    metrics = {"weight_norm": 10.0 * sigma, "weight_norm_ratio": 10.0, **clocks(0.01, 0.0, 2.0)}
    if tau is not None:
        metrics.update(tau_interp=tau, repair_gap=0.02)
    config = RunConfig(opt=opt, sigma=sigma, seed=seed, **({"lr": lr} if lr else {}))
    return dataclasses.replace(record(config, acc, metrics=metrics, weight_norms=[(0, 9.0), (1, 10.0)]), num_classes=10)


#: The edges a figure must hold at: nothing interpolates, one sigma at chance, 2 seeds, one group, eight.
EDGES = {
    "nothing interpolates": [
        edge_cell(opt, sigma, seed, 0.8 - 0.1 * sigma)
        for opt in ("sgd", "adam")
        for sigma in (0.3, 1.0, 3.0)
        for seed in range(3)
    ],
    "one sigma at chance": [
        edge_cell(opt, sigma, seed, 0.10 if (opt, sigma) == ("adam", 0.3) else 0.8, tau=3)
        for opt in ("sgd", "adam")
        for sigma in (0.3, 1.0)
        for seed in range(3)
    ],
    "two seeds": [
        edge_cell(o, s, k, 0.5 + 0.4 * k, tau=3) for o in ("sgd", "adam") for s in (0.3, 1.0) for k in range(2)
    ],
    "one group": [edge_cell("sgd", s, k, 0.8, tau=3) for s in (0.3, 1.0) for k in range(3)],
    "eight groups": [
        edge_cell("sgd", s, k, 0.8 - 0.01 * i, tau=3, lr=0.01 * (i + 1))
        for i in range(8)
        for s in (0.3, 1.0)
        for k in range(3)
    ],
}


@pytest.mark.parametrize("edge", EDGES)
def test_every_figure_holds_at_the_edges_without_a_warning(edge, tmp_path, monkeypatch):
    """No warning (constrained layout applied), the legend below every axis and its tick labels."""
    import warnings

    report = build_report(EDGES[edge])
    for draw in ALL:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            figure = drawn(report, draw, tmp_path, monkeypatch)
        renderer = figure.canvas.get_renderer()
        for legend in figure.legends:
            top = legend.get_window_extent(renderer).y1
            for ax in figure.axes:
                labels = [t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
                assert all(top <= t.get_window_extent(renderer).y0 + 1 for t in labels), (edge, draw.__name__)
                assert top <= ax.get_window_extent(renderer).y0, (edge, draw.__name__)


def test_the_interpolation_figure_of_a_sweep_where_nothing_interpolates_has_the_sigmas_as_ticks(tmp_path, monkeypatch):
    figure = drawn(build_report(EDGES["nothing interpolates"]), plots.tau_interp_vs_sigma, tmp_path, monkeypatch)
    (ax,) = figure.axes
    assert list(ax.get_xticks()) == [0.3, 1.0, 3.0]
    low, high = ax.get_xlim()
    assert low < 0.3 and high > 3.0
    marks = [c for c in ax.collections if (c.get_gid() or "").endswith("|never")]
    assert all(low < x < high for c in marks for x, _ in c.get_offsets())  # the marks inside the axes


def test_the_accuracy_figure_marks_a_sigma_at_chance_and_sets_groups_bars_apart(tmp_path, monkeypatch):
    report = build_report(EDGES["one sigma at chance"])
    figure = drawn(report, plots.accuracy_vs_sigma, tmp_path, monkeypatch)
    (ax,) = figure.axes
    lines = lines_by_gid(figure)
    adam, sgd = (g.group for g in report.groups)
    assert all(a < s for a, s in zip(lines[adam].get_xdata(), lines[sgd].get_xdata()))  # dodged, not on top
    (ring,) = [c for c in ax.collections if c.get_gid() == f"{adam}|untrained"]
    assert [round(y) for _, y in ring.get_offsets()] == [10]
    assert not [c for c in ax.collections if c.get_gid() == f"{sgd}|untrained" and len(c.get_offsets())]
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert any("spread rests on σ 0.3, which did not train" in t for t in legend), legend
    assert any(t.startswith("did not train") for t in legend), legend
    # two seeds far apart draw bars, one seed none: the title promises bars only where they are drawn
    assert "bars: 95% CI" in ax.get_title()
    one_seed = drawn(
        build_report([c for c in EDGES["one group"] if c.config.seed == 0]),
        plots.accuracy_vs_sigma,
        tmp_path,
        monkeypatch,
    )
    assert "bars" not in one_seed.axes[0].get_title()


def test_memory_vs_epoch_marks_where_runs_stopped_early(tmp_path, monkeypatch):
    cells = forgetting_sweeps.synthetic_sweep(0, groups=((0.0, 0.01), (0.0, 0.1)), epochs=6)
    for index, cell in enumerate(cells):  # as if --patience 2 had stopped each at epoch 4, 5 or 6
        cell.config = cell.config.replace(patience=2)
        cell.metrics["stop_epoch"] = 4 + index % 3
    report = build_report(cells)
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda figure, path: figures.append(figure) or path)
    plots.memory_vs_epoch(report, tmp_path / "figure.png", records=cells)
    stops = {g: line for g, line in lines_by_gid(figures[0]).items() if g.endswith("|stops")}
    groups = group_keys([c.config for c in cells])
    for group in report.forgetting:
        expected = sorted(c.metrics["stop_epoch"] for c, g in zip(cells, groups) if g == group and c.trained)
        for memory in ("radial", "directional"):
            assert sorted(stops[f"{group}|{memory}|stops"].get_xdata()) == expected
    assert "where runs stopped" in figures[0]._suptitle.get_text()
    # no records of runs stopped by --patience: no ticks
    figures.clear()
    plots.memory_vs_epoch(report, tmp_path / "figure.png")
    assert not [g for g in lines_by_gid(figures[0]) if g.endswith("|stops")]


@pytest.mark.parametrize("draw", [plots.memory_vs_epoch, plots.memory_vs_clock], ids=lambda d: d.__name__)
def test_the_memory_figures_titles_promise_only_what_they_draw(forgetting, draw, tmp_path, monkeypatch):
    """Bands and half-lives in the title where drawn; a 2-seed sweep draws no band and says why."""
    from matplotlib.collections import PolyCollection

    for report in (forgetting, build_report(EDGES["two seeds"])):
        figure = drawn(report, draw, tmp_path, monkeypatch)
        title = figure._suptitle.get_text()
        bands = [c for ax in figure.axes for c in ax.collections if isinstance(c, PolyCollection)]
        dotted = [line for ax in figure.axes for line in ax.get_lines() if line.get_linestyle() == ":"]
        assert ("bands: 95% CI" in title) == bool(bands) and ("no bands: too few seeds" in title) != bool(bands)
        assert ("dotted: half-life" in title) == bool(dotted) and ("no half-life" in title) != bool(dotted)
    assert "no bands" in title  # the two-seed report's
