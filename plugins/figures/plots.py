"""The report's figures of its groups, sigmas and memories (registered in ``__init__.py``); the
claims' forest plot is ``verdicts.py``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from initmem_core.groups import group_keys
from initmem_core.report.forgetting import MEMORIES
from initmem_core.report.memory import Report
from initmem_core.tracking.records import CellRecord
from initmem_core.vocabulary import CLOCK_FORMULAS, CLOCK_SGD, CLOCKS, STOP_EPOCH
from initmem_plugins.figures.canvas import new_figure, save_figure


def _error_bars(values: list[float], lows: list[float], highs: list[float]) -> list[list[float]]:
    """Asymmetric error bars from intervals; 0 where an interval is unknown (one seed)."""
    return [
        [0.0 if math.isnan(lo) else v - lo for v, lo in zip(values, lows)],
        [0.0 if math.isnan(hi) else hi - v for v, hi in zip(values, highs)],
    ]


MEMORY_LABELS = {
    "radial": "radial memory (slope of log‖W‖ on log σ)",
    "directional": "directional memory (mean cos(W, W0))",
    "accuracy": "accuracy memory (debiased spread, pp)",
}


def legend_names(report: Report) -> tuple[dict[str, str], str]:
    """Each group's name in a legend, by its key: its label, as every part of the report names it
    (``GroupSummary.label``: what tells the sweep's groups apart), and what every group shares,
    for the legend's title."""
    return {g.group: g.label or g.group for g in report.groups}, report.shared


#: A clock axis goes logarithmic when its positive values span more than this factor.
LOG_SPAN = 20.0
#: Where a log clock axis shows each group's epoch-0 value (clock 0 has no place on it): a marker
#: at the left edge, in axes fraction, apart from the curve.
EPOCH_ZERO_MARKER = ">"


def group_colours(report: Report) -> dict[str, str]:
    """One colour per group, the same in every figure: by the group's place in the report."""
    groups = dict.fromkeys([*(g.group for g in report.groups), *report.forgetting])
    return {group: f"C{index % 10}" for index, group in enumerate(groups)}


def moved_clocks(values: dict[str, list[float]]) -> list[str]:
    """The clocks (of ``CLOCKS``, in order) any of whose ``values`` is above zero: a panel for a
    clock that never moved (T_L2 without L2) would be empty. T_SGD alone when none moved."""
    return [c for c in CLOCKS if any(v > 0 for v in values.get(c, []))] or [CLOCK_SGD]


def clock_axis(ax, positive: list[float]) -> bool:
    """A clock's x axis: logarithmic when its positive values span decades (then True), else
    linear with short scientific tick labels (clocks are often tiny: T_SGD ~ 1e-4)."""
    if positive and max(positive) / min(positive) > LOG_SPAN:
        ax.set_xscale("log")
        return True
    ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 3), useOffset=False)
    ax.locator_params(axis="x", nbins=4)
    return False


def _wrapped(label: str, width: int) -> str:
    """A group label on as many lines as it needs, broken after its commas."""
    import textwrap

    return "\n".join(textwrap.wrap(label.replace(",", ", "), width)).replace(", ", ",")


def _caption(figure, shared: str) -> None:
    """What every group shares, under a figure without a legend."""
    if shared:
        figure.supxlabel(f"every group: {shared}", fontsize="small", color="0.35")


def _legend_below(figure, shared: str, columns: int = 1) -> None:
    """The legend under the axes (group labels are long: not over the lines), titled with what
    every group shares; only the caption when nothing was drawn (every cell failed)."""
    if not any(ax.get_legend_handles_labels()[0] for ax in figure.axes):
        _caption(figure, shared)
        return
    title = f"every group: {shared}" if shared else None
    figure.legend(loc="outside lower center", fontsize="small", title=title, title_fontsize="small", ncols=columns)


def _spread_label(group, name: str) -> str:
    """A group's legend entry: its name and its debiased spread with the 95% interval (what the
    report compares groups by), not the paper's max − min, which noise biases upward."""
    if group.did_not_train:
        return f"{name} (did not train)"
    carried = [s for s in (group.best_sigma, group.worst_sigma) if s in group.untrained_sigmas]
    if carried:  # the spread measures a sigma that did not train, not memory
        return f"{name} (spread rests on σ {', '.join(f'{s:g}' for s in carried)}, which did not train)"
    if math.isnan(group.debiased_spread):
        return f"{name} (debiased spread: –)"
    if math.isnan(group.debiased_spread_lo):
        return f"{name} (debiased spread {group.debiased_spread:+.1f} pp, no interval)"
    return (
        f"{name} (debiased spread {group.debiased_spread:+.1f} pp "
        f"[{group.debiased_spread_lo:+.1f}, {group.debiased_spread_hi:+.1f}])"
    )


def accuracy_vs_sigma(report: Report, path: Path) -> Path:
    """The paper's main figure: test accuracy of the selected predictor against sigma, per group,
    with the 95% interval of the mean over seeds as error bars."""
    figure = new_figure(7.0, 6.4)  # room for the legend below
    ax = figure.add_subplot()
    names, shared = legend_names(report)
    colours = group_colours(report)
    sigmas = [r.sigma for r in report.rows] or [0.0]
    dodge = 0.012 * ((max(sigmas) - min(sigmas)) or 1.0)  # groups' bars side by side, not hiding each other
    marked = False
    for index, group in enumerate(report.groups):
        rows = [r for r in report.rows if r.group == group.group and not math.isnan(r.test_acc)]
        values = [r.test_acc for r in rows]
        # A t interval over three seeds can reach past 0 or 100: an accuracy cannot.
        lows = [lo if math.isnan(lo) else max(lo, 0.0) for lo in (r.test_acc_lo for r in rows)]
        highs = [hi if math.isnan(hi) else min(hi, 100.0) for hi in (r.test_acc_hi for r in rows)]
        offset = (index - (len(report.groups) - 1) / 2) * dodge
        ax.errorbar(
            [r.sigma + offset for r in rows],
            values,
            yerr=_error_bars(values, lows, highs),
            marker="o",
            capsize=3,
            color=colours[group.group],
            label=_spread_label(group, names[group.group]),
            gid=group.group,
        )
        untrained = [r for r in rows if r.untrained]
        if untrained:
            ax.scatter(
                [r.sigma + offset for r in untrained],
                [r.test_acc for r in untrained],
                s=160,
                facecolors="none",
                edgecolors="0.2",
                linewidths=1.2,
                zorder=3,
                label=None if marked else "did not train (at chance, or none fit)",
                gid=f"{group.group}|untrained",
            )
            marked = True
    for chance in sorted({g.chance_acc for g in report.groups if not math.isnan(g.chance_acc)}):
        ax.axhline(chance, color="0.4", linestyle="--", linewidth=1.0, label=f"chance ({chance:.3g}%)", gid="chance")
    low, high = ax.get_ylim()
    ax.set_ylim(max(low, 0.0), min(high, 100.0))
    ax.set(
        xlabel="σ_w",
        ylabel="test accuracy at best-val checkpoint (%)",
        title="Initialization memory: test accuracy vs σ_w"
        + (" (bars: 95% CI over seeds)" if any(not math.isnan(r.test_acc_lo) for r in report.rows) else ""),
    )
    ax.grid(alpha=0.3)
    _legend_below(figure, shared)
    return save_figure(figure, path)


def weight_norm_curves(report: Report, path: Path) -> Path:
    """||W||_F over epochs, one panel per group, coloured by sigma: radial memory at a glance."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    groups = [g.group for g in report.groups]
    names, shared = legend_names(report)
    columns = min(3, max(1, len(groups)))
    rows = math.ceil(len(groups) / columns) or 1
    figure = new_figure(4.2 * columns + 1.0, 3.4 * rows)
    axes = figure.subplots(rows, columns, squeeze=False, sharey=True)
    sigmas = [r.sigma for r in report.rows] or [1.0]
    norm = Normalize(min(sigmas), max(sigmas) if max(sigmas) > min(sigmas) else min(sigmas) + 1)
    cmap = colormaps["viridis"]
    for ax, group in zip(axes.flat, groups):
        for sigma, seed, curve in report.norm_curves.get(group, []):
            epochs, values = zip(*curve)
            ax.plot(epochs, values, color=cmap(norm(sigma)), alpha=0.85, gid=f"{group}|{sigma:g}|{seed}")
        ax.set_title(_wrapped(names[group], 38), fontsize="small")  # long labels would run into the next panel
        ax.set(xlabel="epoch")
        ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("‖W‖_F")
    for ax in list(axes.flat)[len(groups) :]:
        ax.set_visible(False)
    figure.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, label="σ_w")
    _caption(figure, shared)
    return save_figure(figure, path)


def spread_vs_clocks(report: Report, path: Path) -> Path:
    """Does forgetting follow the clocks? One point per group (its debiased spread and 95% interval,
    what groups are compared by) in the panel of each clock that moved, one colour per group across
    the panels (named in the legend: labels beside points would overlap)."""
    groups = [g for g in report.groups if not math.isnan(g.spread)]
    names, shared = legend_names(report)
    colours = group_colours(report)
    clocks = moved_clocks({c: [getattr(g, c) for g in groups] for c in CLOCKS})
    columns = 2 if len(groups) > 3 else 1
    figure = new_figure(4.4 * len(clocks) + 1.0, 4.6 + 0.22 * math.ceil(len(groups) / columns))
    axes = figure.subplots(1, len(clocks), sharey=True, squeeze=False)[0]
    for ax, clock in zip(axes, clocks):
        x = [getattr(g, clock) for g in groups]
        for g, value in zip(groups, x):
            ax.errorbar(
                [value],
                [g.debiased_spread],
                yerr=_error_bars([g.debiased_spread], [g.debiased_spread_lo], [g.debiased_spread_hi]),
                fmt="o",
                capsize=3,
                color=colours[g.group],
                label=names[g.group] if ax is axes[0] else None,
                gid=g.group,
            )
        clock_axis(ax, [v for v in x if v > 0] if min(x, default=0) > 0 else [])
        ax.set(xlabel=CLOCK_FORMULAS[clock])
        ax.axhline(0.0, color="0.5", linewidth=0.8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("debiased spread over σ_w (pp, 95% CI)")
    figure.suptitle("Debiased spread vs the forgetting clocks that moved, at the end of training")
    _legend_below(figure, shared, columns)
    return save_figure(figure, path)


#: The band above the epochs where runs that never interpolated are drawn, as a share of the axis
NEVER_BAND = 0.12


def tau_interp_vs_sigma(report: Report, path: Path) -> Path:
    """First epoch with train accuracy >= threshold (mean over the seeds that got there), and in a
    band above every epoch the runs that never interpolated, at each sigma where any did, their
    number beside the marker and in the legend: never at y = 0, which reads as epoch 0."""
    from matplotlib.transforms import blended_transform_factory

    figure = new_figure(7.0, 6.4)  # room for the legend below
    ax = figure.add_subplot()
    names, shared = legend_names(report)
    colours = group_colours(report)
    sigmas = [r.sigma for r in report.rows] or [0.0]
    dodge = 0.012 * ((max(sigmas) - min(sigmas)) or 1.0)  # x markers of different groups side by side
    band = blended_transform_factory(ax.transData, ax.transAxes)  # x in sigma, y in axes fraction
    never_total = 0
    for index, group in enumerate(report.groups):
        rows = [r for r in report.rows if r.group == group.group]
        reached = [r for r in rows if not math.isnan(r.tau_interp)]
        never = [r for r in rows if r.never_interp > 0]
        trained = sum(r.runs - r.failed for r in rows)
        missing = sum(r.never_interp for r in never)
        never_total += missing
        label = names[group.group] + (f" ({missing} of {trained} runs never interpolated)" if missing else "")
        (line,) = ax.plot(
            [r.sigma for r in reached],
            [r.tau_interp for r in reached],
            marker="o",
            color=colours[group.group],
            label=label,
            gid=group.group,
        )
        if never:
            offset = (index - (len(report.groups) - 1) / 2) * dodge
            xs = [r.sigma + offset for r in never]
            ax.scatter(
                xs,
                [1 - NEVER_BAND / 2] * len(never),
                marker="x",
                color=line.get_color(),
                transform=band,
                gid=f"{group.group}|never",
            )
            for x, r in zip(xs, never):
                ax.annotate(
                    f"{r.never_interp}/{r.runs - r.failed}",
                    (x, 1 - NEVER_BAND / 2),
                    xycoords=band,
                    xytext=(4, 3),
                    textcoords="offset points",
                    fontsize="x-small",
                    color=line.get_color(),
                )
    epochs = [r.tau_interp for r in report.rows if not math.isnan(r.tau_interp)]
    top = max(epochs, default=1.0)
    if not epochs and report.rows:  # no line sets the x axis (the band's marks do not): the sigmas do
        pad = 0.08 * ((max(sigmas) - min(sigmas)) or 1.0)
        ax.set_xlim(min(sigmas) - pad, max(sigmas) + pad)
        ax.set_xticks(sorted(set(sigmas)), [f"{s:g}" for s in sorted(set(sigmas))])
    # The epochs take the axis below the band; the band holds no epoch.
    ax.set_ylim(0.0, top * 1.08 / (1 - NEVER_BAND) + 1e-9 if top > 0 else 1.0)
    if never_total:
        from matplotlib.patches import Rectangle

        ax.add_patch(Rectangle((0.0, 1 - NEVER_BAND), 1.0, NEVER_BAND, transform=ax.transAxes, color="0.92", zorder=0))
        ax.text(
            0.01,
            1 - NEVER_BAND / 2,
            "never\ninterpolated",
            transform=ax.transAxes,
            fontsize="x-small",
            va="center",
            color="0.35",
        )
        ax.set_yticks([t for t in ax.get_yticks() if 0 <= t <= top * 1.08])
    title = "Interpolation epoch vs σ_w (mean over the seeds that interpolated)"
    ax.set(xlabel="σ_w", ylabel="τ_interp (epoch)", title=title)
    ax.grid(alpha=0.3)
    _legend_below(figure, shared)
    return save_figure(figure, path)


# -- memory over training (report/forgetting.py) --------------------------------------------


def _draw_memory(
    ax, found, memory: str, unit: str, colour: str, label: str | None, gid: str, log: bool = False
) -> None:
    """One group's ``memory`` against ``unit`` (the epoch or a clock), with its 95% band, its
    half-life and half its initial value marked. On a log axis (``log``) the points at clock 0 (epoch
    0, before the clock moved) have no place: each is a marker at the axis' left edge, apart from the
    curve, not a line drawn across decades to it."""

    def x_of(point) -> float:
        return getattr(point, unit)

    shown = [p for p in found.curves.get(memory, []) if not math.isnan(p.value) and not math.isnan(x_of(p))]
    if log:
        start = [p for p in shown if x_of(p) <= 0]
        shown = [p for p in shown if x_of(p) > 0]
        if start:
            from matplotlib.transforms import blended_transform_factory

            edge = blended_transform_factory(ax.transAxes, ax.transData)
            ax.plot(
                [0.0] * len(start),
                [p.value for p in start],
                EPOCH_ZERO_MARKER,
                color=colour,
                transform=edge,
                clip_on=False,
                gid=f"{gid}|epoch0",
            )
    if shown:
        xs = [x_of(p) for p in shown]
        ax.plot(
            xs, [p.value for p in shown], color=colour, label=label, marker="." if len(shown) < 30 else None, gid=gid
        )
        banded = [(x, p) for x, p in zip(xs, shown) if not math.isnan(p.lo) and not math.isnan(p.hi)]
        if banded:
            lows, highs = [p.lo for _, p in banded], [p.hi for _, p in banded]
            ax.fill_between([x for x, _ in banded], lows, highs, color=colour, alpha=0.18, linewidth=0)
    _mark_half_life(ax, found.half_lives.get(memory), unit, colour)
    _mark_half_level(ax, found.half_lives.get(memory), colour, gid)


def _mark_half_life(ax, half, unit: str, colour: str) -> None:
    """A half-life as a dotted line at its value and its interval as a short bar at half height."""
    if half is None or not half.reached:
        return
    value, low, high = half.value(unit)
    if math.isnan(value):
        return
    ax.axvline(value, color=colour, linestyle=":", linewidth=1.2)
    if not (math.isnan(low) and math.isnan(high)):
        low, high = (value if math.isnan(low) else low), (value if math.isnan(high) else high)
        ax.plot([low, high], [half.initial / 2] * 2, color=colour, linewidth=3, alpha=0.6, solid_capstyle="butt")


def _mark_half_level(ax, half, colour: str, gid: str) -> None:
    """Half the memory's initial value, a dashed line across the panel: where the curve crosses it
    is the half-life (drawn whether or not it was reached within the horizon)."""
    if half is None or math.isnan(half.initial) or half.initial <= 0:
        return
    ax.axhline(half.initial / 2, color=colour, linestyle="--", linewidth=0.9, alpha=0.7, gid=f"{gid}|half")


def _memory_axis(ax, memory: str) -> None:
    """Radial and directional memory are shares of the initial state: from 0 to 1 (further up only
    if a value is), so that a change of 0.3% looks like one. Accuracy memory (pp) keeps 0 in view."""
    low, high = ax.get_ylim()
    if memory == "accuracy":
        ax.set_ylim(min(low, 0.0), max(high, 0.0))
    else:
        ax.set_ylim(min(low, 0.0), max(high, 1.0) if high > 1.0 else 1.0)


def _memory_groups(report: Report) -> tuple[list[str], dict[str, str], str, dict[str, str]]:
    groups = list(report.forgetting)
    return groups, {g: report.label(g) for g in groups}, report.shared, group_colours(report)


def _marks(report: Report, groups: list[str], memories: list[str], units: list[str]) -> str:
    """What the memory figures' lines mean, promising only what they draw: the 95% bands where a
    curve has one, the dashed half of the initial value, the dotted half-lives where one was
    reached; what is not drawn says why."""
    found = [(report.forgetting[g], m) for g in groups for m in memories]
    banded = any(not math.isnan(p.lo) and not math.isnan(p.hi) for f, m in found for p in f.curves.get(m, []))
    halves = [half for f, m in found if (half := f.half_lives.get(m)) is not None]
    lives = any(h.reached and not math.isnan(h.value(unit)[0]) for h in halves for unit in units)
    marks = ["bands: 95% CI" if banded else "no bands: too few seeds for a 95% CI"]
    if any(not math.isnan(h.initial) and h.initial > 0 for h in halves):
        marks.append("dashed: half the initial value")
    marks.append("dotted: half-life" if lives else "no half-life: no curve fell to half within the horizon")
    return "; ".join(marks)


def _say_if_empty(figure, groups: list[str]) -> None:
    if not groups:  # records read without their histories (an older store, hand-made records)
        figure.text(0.5, 0.5, "no per-epoch histories in these records", ha="center", va="center", color="0.35")


def _early_stops(records: Sequence[CellRecord]) -> dict[str, list[int]]:
    """group -> the epochs its trained runs stopped at, where --patience could stop them early."""
    stops: dict[str, list[int]] = {}
    for record, group in zip(records, group_keys([r.config for r in records])):
        if record.trained and record.config.patience and STOP_EPOCH in record.metrics:
            stops.setdefault(group, []).append(int(record.metrics[STOP_EPOCH]))
    return stops


def memory_vs_epoch(report: Report, path: Path, records: Sequence[CellRecord] = ()) -> Path:
    """Every memory against the epoch: a panel per memory, a line per group with its 95% band,
    each half-life a dotted line (its interval a bar at half the initial value); where runs
    stopped early (``--patience``), a tick at the foot of each panel per run's stop epoch."""
    groups, names, shared, colours = _memory_groups(report)
    stops = _early_stops(records)
    figure = new_figure(14.0, 4.8 + 0.22 * math.ceil(len(groups) / 2))
    axes = figure.subplots(1, len(MEMORIES))
    for ax, memory in zip(axes, MEMORIES):
        for group in groups:
            label = names[group] if ax is axes[0] else None
            _draw_memory(ax, report.forgetting[group], memory, "epoch", colours[group], label, f"{group}|{memory}")
            if stops.get(group):  # x in epochs, y in the panel's own height: a rug along its foot
                foot = ax.get_xaxis_transform()
                ax.plot(
                    stops[group],
                    [0.02] * len(stops[group]),
                    "|",
                    color=colours[group],
                    markersize=9,
                    transform=foot,
                    gid=f"{group}|{memory}|stops",
                )
        _memory_axis(ax, memory)
        ax.set(xlabel="epoch", title=MEMORY_LABELS[memory])
        ax.title.set_fontsize("small")
        ax.grid(alpha=0.3)
    rug = "; ticks at the foot: where runs stopped (--patience)" if stops else ""
    figure.suptitle(f"Memory over training ({_marks(report, groups, list(MEMORIES), ['epoch'])}{rug})")
    _say_if_empty(figure, groups)
    _legend_below(figure, shared, 2 if len(groups) > 3 else 1)
    return save_figure(figure, path)


def memory_vs_clock(report: Report, path: Path) -> Path:
    """Every memory against every clock that moved: a row per memory, a panel per clock, a line per
    group with its 95% band and its half-life marked. A group whose clock never moves has no line in
    that clock's panels; a clock no group moved (T_L2 without L2) has no panel."""
    groups, names, shared, colours = _memory_groups(report)
    memories = [m for m in MEMORIES if any(m in report.forgetting[g].curves for g in groups)] or ["radial"]
    points = [p for g in groups for curve in report.forgetting[g].curves.values() for p in curve]
    clocks = moved_clocks({c: [getattr(p, c) for p in points] for c in CLOCKS})
    figure = new_figure(4.4 * len(clocks) + 1.6, 3.4 * len(memories) + 0.8 + 0.22 * math.ceil(len(groups) / 2))
    axes = figure.subplots(len(memories), len(clocks), squeeze=False)
    for row, memory in zip(axes, memories):
        for ax, clock in zip(row, clocks):
            moving = [
                g for g in groups if any(getattr(p, clock) > 0 for p in report.forgetting[g].curves.get(memory, []))
            ]
            positive = [
                getattr(p, clock) for g in moving for p in report.forgetting[g].curves[memory] if getattr(p, clock) > 0
            ]
            log = clock_axis(ax, positive)
            for group in moving:
                label = names[group] if memory == memories[0] and clock == clocks[0] else None
                gid = f"{group}|{memory}|{clock}"
                _draw_memory(ax, report.forgetting[group], memory, clock, colours[group], label, gid, log)
            _memory_axis(ax, memory)
            edge = f" (log; {EPOCH_ZERO_MARKER} at the left edge: epoch 0)" if log and moving else ""
            ax.set_xlabel(CLOCK_FORMULAS[clock] + edge, fontsize="small" if edge else None)
            ax.grid(alpha=0.3)
        row[0].set_ylabel(MEMORY_LABELS[memory], fontsize="small")
    figure.suptitle(f"Memory against the forgetting clocks that moved ({_marks(report, groups, memories, clocks)})")
    _say_if_empty(figure, groups)
    _legend_below(figure, shared, 2 if len(groups) > 3 else 1)
    return save_figure(figure, path)
