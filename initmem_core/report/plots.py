"""The report's figures as PNG files, drawn with matplotlib's Agg canvas (``report/figures.py``);
the claims' forest plot is ``report/verdict_plot.py``."""

from __future__ import annotations

import math
from pathlib import Path

from initmem_core.groups import short_group_names
from initmem_core.report.figures import new_figure, save_figure
from initmem_core.report.forgetting import MEMORIES, MEMORY_LABELS
from initmem_core.report.memory import Report
from initmem_core.report.verdict_plot import VERDICTS_PLOT, verdict_plot
from initmem_core.vocabulary import CLOCK_FORMULAS, CLOCK_L2, CLOCK_SGD, CLOCKS


def warm_up() -> None:
    """Import matplotlib and draw a throw-away figure with the report's symbols, so that fonts and
    text layout are loaded before the report is due (a sweep calls this while its cells run)."""
    figure = new_figure(2.0, 2.0)
    ax = figure.add_subplot()
    ax.errorbar([0.0, 1.0], [0.0, 1.0], yerr=[[0.1, 0.1], [0.1, 0.1]], marker="o", label="σ_w")
    ax.set(xlabel=CLOCK_FORMULAS[CLOCK_SGD], title=CLOCK_FORMULAS[CLOCK_L2])
    figure.legend(loc="outside lower center", fontsize="small")
    figure.canvas.draw()


def _error_bars(values: list[float], lows: list[float], highs: list[float]) -> list[list[float]]:
    """Asymmetric error bars from intervals; 0 where an interval is unknown (one seed)."""
    return [
        [0.0 if math.isnan(lo) else v - lo for v, lo in zip(values, lows)],
        [0.0 if math.isnan(hi) else hi - v for v, hi in zip(values, highs)],
    ]


def _wrapped(label: str, width: int) -> str:
    """A group label on as many lines as it needs, broken after its commas."""
    import textwrap

    return "\n".join(textwrap.wrap(label.replace(",", ", "), width)).replace(", ", ",")


def _shared_text(shared: str) -> str | None:
    return f"every group: {shared}" if shared else None


def _caption(figure, shared: str) -> None:
    """What every group shares, under a figure without a legend."""
    if shared:
        figure.supxlabel(_shared_text(shared), fontsize="small", color="0.35")


def _legend_below(figure, shared: str, columns: int = 1) -> None:
    """The legend under the axes (group labels are long: not over the lines), titled with what
    every group shares; only the caption when nothing was drawn (every cell failed)."""
    if not any(ax.get_legend_handles_labels()[0] for ax in figure.axes):
        _caption(figure, shared)
        return
    figure.legend(
        loc="outside lower center", fontsize="small", title=_shared_text(shared), title_fontsize="small", ncols=columns
    )


def _spread_label(group, name: str) -> str:
    if group.did_not_train:
        return f"{name} (did not train)"
    if math.isnan(group.spread_lo):
        return f"{name} (spread {group.spread:.1f} pp)"
    return f"{name} (spread {group.spread:.1f} pp [{group.spread_lo:.1f}, {group.spread_hi:.1f}])"


def accuracy_vs_sigma(report: Report, path: Path) -> Path:
    """The paper's main figure: test accuracy of the selected predictor against sigma, per group,
    with the 95% interval of the mean over seeds as error bars."""
    figure = new_figure(7.0, 6.4)  # room for the legend below
    ax = figure.add_subplot()
    names, shared = short_group_names([g.group for g in report.groups])
    for group in report.groups:
        rows = [r for r in report.rows if r.group == group.group and not math.isnan(r.test_acc)]
        values = [r.test_acc for r in rows]
        ax.errorbar(
            [r.sigma for r in rows],
            values,
            yerr=_error_bars(values, [r.test_acc_lo for r in rows], [r.test_acc_hi for r in rows]),
            marker="o",
            capsize=3,
            label=_spread_label(group, names[group.group]),
        )
    ax.set(
        xlabel="σ_w",
        ylabel="test accuracy at best-val checkpoint (%)",
        title="Initialization memory: test accuracy vs σ_w (bars: 95% CI over seeds)",
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
    names, shared = short_group_names(groups)
    columns = min(3, max(1, len(groups)))
    rows = math.ceil(len(groups) / columns) or 1
    figure = new_figure(4.2 * columns + 1.0, 3.4 * rows)
    axes = figure.subplots(rows, columns, squeeze=False, sharey=True)
    sigmas = [r.sigma for r in report.rows] or [1.0]
    norm = Normalize(min(sigmas), max(sigmas) if max(sigmas) > min(sigmas) else min(sigmas) + 1)
    cmap = colormaps["viridis"]
    for ax, group in zip(axes.flat, groups):
        for sigma, _seed, curve in report.norm_curves.get(group, []):
            epochs, values = zip(*curve)
            ax.plot(epochs, values, color=cmap(norm(sigma)), alpha=0.85)
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
    """Does forgetting follow the clocks? One point per group in each clock's panel, one colour
    per group across the panels (named in the legend: labels beside points would overlap)."""
    groups = [g for g in report.groups if not math.isnan(g.spread)]
    names, shared = short_group_names([g.group for g in report.groups])
    columns = 2 if len(groups) > 3 else 1
    figure = new_figure(13.0, 4.6 + 0.22 * math.ceil(len(groups) / columns))  # room for the legend below
    axes = figure.subplots(1, len(CLOCKS), sharey=True)
    colours = [f"C{index % 10}" for index in range(len(groups))]
    for ax, clock in zip(axes, CLOCKS):
        x = [getattr(g, clock) for g in groups]
        for g, value, colour in zip(groups, x, colours):
            ax.errorbar(
                [value],
                [g.spread],
                yerr=_error_bars([g.spread], [g.spread_lo], [g.spread_hi]),
                fmt="o",
                capsize=3,
                color=colour,
                label=names[g.group] if ax is axes[0] else None,
            )
        if x and min(x) > 0 and max(x) / min(x) > 20:
            ax.set_xscale("log")
        else:  # clocks are often tiny (T_SGD ~ 1e-4): short scientific tick labels
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 3), useOffset=False)
            ax.locator_params(axis="x", nbins=4)
        ax.set(xlabel=CLOCK_FORMULAS[clock])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("spread over σ_w (pp, 95% bootstrap CI)")
    figure.suptitle("Spread vs forgetting clocks at the end of training")
    if groups:
        _legend_below(figure, shared, columns)
    else:
        _caption(figure, shared)
    return save_figure(figure, path)


def tau_interp_vs_sigma(report: Report, path: Path) -> Path:
    """First epoch with train accuracy >= threshold; sigmas that never interpolated are marked x."""
    figure = new_figure(7.0, 6.4)  # room for the legend below
    ax = figure.add_subplot()
    names, shared = short_group_names([g.group for g in report.groups])
    sigmas = [r.sigma for r in report.rows] or [0.0]
    dodge = 0.012 * ((max(sigmas) - min(sigmas)) or 1.0)  # x markers of different groups side by side
    for index, group in enumerate(report.groups):
        rows = [r for r in report.rows if r.group == group.group]
        reached = [r for r in rows if not math.isnan(r.tau_interp)]
        (line,) = ax.plot(
            [r.sigma for r in reached], [r.tau_interp for r in reached], marker="o", label=names[group.group]
        )
        never = [r.sigma for r in rows if math.isnan(r.tau_interp) and r.runs > r.failed]
        if never:
            offset = (index - (len(report.groups) - 1) / 2) * dodge
            ax.scatter(
                [sigma + offset for sigma in never],
                [0.0] * len(never),
                marker="x",
                color=line.get_color(),
                clip_on=False,
            )
    ax.set(xlabel="σ_w", ylabel="τ_interp (epoch)", title="Interpolation epoch vs σ_w (x at 0: never interpolated)")
    ax.grid(alpha=0.3)
    _legend_below(figure, shared)
    return save_figure(figure, path)


PLOTS = {
    "test_acc_vs_sigma.png": accuracy_vs_sigma,
    "weight_norm_vs_epoch.png": weight_norm_curves,
    "spread_vs_clocks.png": spread_vs_clocks,
    "tau_interp_vs_sigma.png": tau_interp_vs_sigma,
}


def write_plots(report: Report, folder: str | Path) -> list[Path]:
    """Every report figure into ``folder``; returns the paths written."""
    folder = Path(folder)
    written = [draw(report, folder / name) for name, draw in PLOTS.items()]
    if report.findings:  # the claims were evaluated on this report (report/assessment.py)
        written.append(verdict_plot(report, folder / VERDICTS_PLOT))
    return written


# -- memory over training (report/forgetting.py) --------------------------------------------


def _memory_curve(ax, points, x_of, colour: str, label: str | None) -> None:
    """One group's memory against ``x_of(point)``, with its 95% band where it has one."""
    shown = [p for p in points if not math.isnan(p.value) and not math.isnan(x_of(p))]
    if not shown:
        return
    xs = [x_of(p) for p in shown]
    ax.plot(xs, [p.value for p in shown], color=colour, label=label, marker="." if len(shown) < 30 else None)
    banded = [(x, p) for x, p in zip(xs, shown) if not math.isnan(p.lo) and not math.isnan(p.hi)]
    if banded:
        ax.fill_between(
            [x for x, _ in banded],
            [p.lo for _, p in banded],
            [p.hi for _, p in banded],
            color=colour,
            alpha=0.18,
            linewidth=0,
        )


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


def _memory_groups(report: Report) -> tuple[list[str], dict[str, str], str, dict[str, str]]:
    groups = list(report.forgetting)
    names, shared = short_group_names([g.group for g in report.groups] or groups)
    colours = {group: f"C{index % 10}" for index, group in enumerate(groups)}
    return groups, {g: names.get(g, g) for g in groups}, shared, colours


def _say_if_empty(figure, groups: list[str]) -> None:
    if not groups:  # records read without their histories (an older store, hand-made records)
        figure.text(0.5, 0.5, "no per-epoch histories in these records", ha="center", va="center", color="0.35")


def memory_vs_epoch(report: Report, path: Path) -> Path:
    """Every memory against the epoch: a panel per memory, a line per group with its 95% band,
    each half-life a dotted line (its interval a bar at half the initial value)."""
    groups, names, shared, colours = _memory_groups(report)
    figure = new_figure(14.0, 4.8 + 0.22 * math.ceil(len(groups) / 2))
    axes = figure.subplots(1, len(MEMORIES))
    for ax, memory in zip(axes, MEMORIES):
        for group in groups:
            found = report.forgetting[group]
            _memory_curve(
                ax,
                found.curves.get(memory, []),
                lambda p: p.epoch,
                colours[group],
                names[group] if ax is axes[0] else None,
            )
            _mark_half_life(ax, found.half_lives.get(memory), "epoch", colours[group])
        ax.set(xlabel="epoch", title=MEMORY_LABELS[memory])
        ax.title.set_fontsize("small")
        ax.grid(alpha=0.3)
    figure.suptitle("Memory over training (bands: 95% CI; dotted: half-life)")
    _say_if_empty(figure, groups)
    if groups:
        _legend_below(figure, shared, 2 if len(groups) > 3 else 1)
    else:
        _caption(figure, shared)
    return save_figure(figure, path)


def memory_vs_clock(report: Report, path: Path) -> Path:
    """Every memory against every clock: a row per memory, a panel per clock, a line per group
    with its 95% band and its half-life marked. A group whose clock never moves has no line in
    that clock's panels."""
    groups, names, shared, colours = _memory_groups(report)
    memories = [m for m in MEMORIES if any(m in report.forgetting[g].curves for g in groups)] or ["radial"]
    figure = new_figure(14.0, 3.4 * len(memories) + 0.8 + 0.22 * math.ceil(len(groups) / 2))
    axes = figure.subplots(len(memories), len(CLOCKS), squeeze=False)
    for row, memory in zip(axes, memories):
        for ax, clock in zip(row, CLOCKS):
            positive = []
            for group in groups:
                found = report.forgetting[group]
                curve = found.curves.get(memory, [])
                if not any(getattr(p, clock) > 0 for p in curve):
                    continue
                positive += [getattr(p, clock) for p in curve if getattr(p, clock) > 0]
                _memory_curve(
                    ax,
                    curve,
                    lambda p, c=clock: getattr(p, c),
                    colours[group],
                    names[group] if memory == memories[0] and clock == CLOCKS[0] else None,
                )
                _mark_half_life(ax, found.half_lives.get(memory), clock, colours[group])
            if positive and max(positive) / min(positive) > 50:
                ax.set_xscale("symlog", linthresh=min(positive))  # groups' clocks differ by decades; 0 stays on it
            else:
                ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 3), useOffset=False)
            ax.set(xlabel=CLOCK_FORMULAS[clock])
            ax.grid(alpha=0.3)
        row[0].set_ylabel(MEMORY_LABELS[memory], fontsize="small")
    figure.suptitle("Memory against the forgetting clocks (bands: 95% CI; dotted: half-life)")
    _say_if_empty(figure, groups)
    handles = [h for ax in axes.flat for h in ax.get_legend_handles_labels()[0]]
    if handles:
        _legend_below(figure, shared, 2 if len(groups) > 3 else 1)
    else:
        _caption(figure, shared)
    return save_figure(figure, path)


PLOTS["memory_vs_epoch.png"] = memory_vs_epoch
PLOTS["memory_vs_clock.png"] = memory_vs_clock
