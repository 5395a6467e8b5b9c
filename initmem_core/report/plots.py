"""The report's figures as PNG files, drawn with matplotlib's Agg canvas.

Figures are built with the object API (``Figure`` + ``FigureCanvasAgg``), never ``pyplot``: no
global backend is switched and nothing opens a window, in a terminal, a notebook or a worker.
"""

from __future__ import annotations

import math
from pathlib import Path

from initmem_core.report.memory import CLOCKS, Report
from initmem_core.sweep.grid import short_group_names

# η is the effective step (η/(1-β) for heavy-ball momentum); λ every shrinking force.
CLOCK_LABELS = {"clock_sgd": "T_SGD = Σ η² / b", "clock_l2": "T_L2 = λ Σ η", "clock_adapt": "T_adapt = Σ η"}


def _figure(width: float = 6.4, height: float = 4.2):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def warm_up() -> None:
    """Import matplotlib and draw a throw-away figure with the report's symbols, so that fonts and
    text layout are loaded before the report is due (a sweep calls this while its cells run)."""
    figure = _figure(2.0, 2.0)
    ax = figure.add_subplot()
    ax.errorbar([0.0, 1.0], [0.0, 1.0], yerr=[[0.1, 0.1], [0.1, 0.1]], marker="o", label="σ_w")
    ax.set(xlabel=CLOCK_LABELS["clock_sgd"], title=CLOCK_LABELS["clock_l2"])
    figure.legend(loc="outside lower center", fontsize="small")
    figure.canvas.draw()


def _save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120, bbox_inches="tight")  # nothing cut at the edges
    return path


def _error_bars(values: list[float], lows: list[float], highs: list[float]) -> list[list[float]]:
    """Asymmetric error bars from intervals; 0 where an interval is unknown (one seed)."""
    return [[0.0 if math.isnan(lo) else v - lo for v, lo in zip(values, lows)],
            [0.0 if math.isnan(hi) else hi - v for v, hi in zip(values, highs)]]


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
    every group shares."""
    figure.legend(loc="outside lower center", fontsize="small", title=_shared_text(shared),
                  title_fontsize="small", ncols=columns)


def _spread_label(group, name: str) -> str:
    if group.did_not_train:
        return f"{name} (did not train)"
    if math.isnan(group.spread_lo):
        return f"{name} (spread {group.spread:.1f} pp)"
    return f"{name} (spread {group.spread:.1f} pp [{group.spread_lo:.1f}, {group.spread_hi:.1f}])"


def accuracy_vs_sigma(report: Report, path: Path) -> Path:
    """The paper's main figure: test accuracy of the selected predictor against sigma, per group,
    with the 95% interval of the mean over seeds as error bars."""
    figure = _figure(7.0, 6.4)  # room for the legend below
    ax = figure.add_subplot()
    names, shared = short_group_names([g.group for g in report.groups])
    for group in report.groups:
        rows = [r for r in report.rows if r.group == group.group and not math.isnan(r.test_acc)]
        values = [r.test_acc for r in rows]
        ax.errorbar([r.sigma for r in rows], values,
                    yerr=_error_bars(values, [r.test_acc_lo for r in rows], [r.test_acc_hi for r in rows]),
                    marker="o", capsize=3, label=_spread_label(group, names[group.group]))
    ax.set(xlabel="σ_w", ylabel="test accuracy at best-val checkpoint (%)",
           title="Initialization memory: test accuracy vs σ_w (bars: 95% CI over seeds)")
    ax.grid(alpha=0.3)
    _legend_below(figure, shared)
    return _save(figure, path)


def weight_norm_curves(report: Report, path: Path) -> Path:
    """||W||_F over epochs, one panel per group, coloured by sigma: radial memory at a glance."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    groups = [g.group for g in report.groups]
    names, shared = short_group_names(groups)
    columns = min(3, max(1, len(groups)))
    rows = math.ceil(len(groups) / columns) or 1
    figure = _figure(4.2 * columns + 1.0, 3.4 * rows)
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
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    figure.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, label="σ_w")
    _caption(figure, shared)
    return _save(figure, path)


def spread_vs_clocks(report: Report, path: Path) -> Path:
    """Does forgetting follow the clocks? One point per group in each clock's panel, one colour
    per group across the panels (named in the legend: labels beside points would overlap)."""
    groups = [g for g in report.groups if not math.isnan(g.spread)]
    names, shared = short_group_names([g.group for g in report.groups])
    columns = 2 if len(groups) > 3 else 1
    figure = _figure(13.0, 4.6 + 0.22 * math.ceil(len(groups) / columns))  # room for the legend below
    axes = figure.subplots(1, len(CLOCKS), sharey=True)
    colours = [f"C{index % 10}" for index in range(len(groups))]
    for ax, clock in zip(axes, CLOCKS):
        x = [getattr(g, clock) for g in groups]
        for g, value, colour in zip(groups, x, colours):
            ax.errorbar([value], [g.spread], yerr=_error_bars([g.spread], [g.spread_lo], [g.spread_hi]),
                        fmt="o", capsize=3, color=colour, label=names[g.group] if ax is axes[0] else None)
        if x and min(x) > 0 and max(x) / min(x) > 20:
            ax.set_xscale("log")
        else:  # clocks are often tiny (T_SGD ~ 1e-4): short scientific tick labels
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 3), useOffset=False)
            ax.locator_params(axis="x", nbins=4)
        ax.set(xlabel=CLOCK_LABELS[clock])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("spread over σ_w (pp, 95% bootstrap CI)")
    figure.suptitle("Spread vs forgetting clocks at the end of training")
    if groups:
        _legend_below(figure, shared, columns)
    else:
        _caption(figure, shared)
    return _save(figure, path)


def tau_interp_vs_sigma(report: Report, path: Path) -> Path:
    """First epoch with train accuracy >= threshold; sigmas that never interpolated are marked x."""
    figure = _figure(7.0, 6.4)  # room for the legend below
    ax = figure.add_subplot()
    names, shared = short_group_names([g.group for g in report.groups])
    sigmas = [r.sigma for r in report.rows] or [0.0]
    dodge = 0.012 * ((max(sigmas) - min(sigmas)) or 1.0)  # x markers of different groups side by side
    for index, group in enumerate(report.groups):
        rows = [r for r in report.rows if r.group == group.group]
        reached = [r for r in rows if not math.isnan(r.tau_interp)]
        line, = ax.plot([r.sigma for r in reached], [r.tau_interp for r in reached], marker="o",
                        label=names[group.group])
        never = [r.sigma for r in rows if math.isnan(r.tau_interp) and r.runs > r.failed]
        if never:
            offset = (index - (len(report.groups) - 1) / 2) * dodge
            ax.scatter([sigma + offset for sigma in never], [0.0] * len(never), marker="x", color=line.get_color(),
                       clip_on=False)
    ax.set(xlabel="σ_w", ylabel="τ_interp (epoch)", title="Interpolation epoch vs σ_w (x at 0: never interpolated)")
    ax.grid(alpha=0.3)
    _legend_below(figure, shared)
    return _save(figure, path)


PLOTS = {
    "test_acc_vs_sigma.png": accuracy_vs_sigma,
    "weight_norm_vs_epoch.png": weight_norm_curves,
    "spread_vs_clocks.png": spread_vs_clocks,
    "tau_interp_vs_sigma.png": tau_interp_vs_sigma,
}


def write_plots(report: Report, folder: str | Path) -> list[Path]:
    """Every report figure into ``folder``; returns the paths written."""
    folder = Path(folder)
    return [draw(report, folder / name) for name, draw in PLOTS.items()]
