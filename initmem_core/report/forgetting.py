"""Memory over training and forgetting times: when a group forgets its initialization, in epochs
and in each forgetting clock (docs/STATISTICS.md, "How a half-life is found").

Pure, like ``report/memory.py``: it reads the per-epoch histories a record carries
(``CellRecord.histories``: step = epoch, 0 = the initialization); ``report/render.py`` writes it
out. Per group and evaluation epoch, three memories, each with the group's mean clocks there:
**radial** (per seed, the slope of log ||W|| on log sigma; mean and t interval over seeds),
**directional** (per seed, the mean ``init_cosine``; the same) and **accuracy** (the debiased
spread of test accuracy at that epoch, pp). A half-life is when a memory first falls to half its
initial value: its value at epoch 0, or for accuracy memory its peak after epoch 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from initmem_core.groups import metric_suffix
from initmem_core.report.inference import NAN, cross_fit_spread, mean_interval
from initmem_core.tracking.records import CellRecord
from initmem_core.vocabulary import CLOCKS, INIT_COSINE, TEST_ACC, WEIGHT_NORM

MEMORIES = ("radial", "directional", "accuracy")
#: The units a half-life is given in: epochs, then each clock.
UNITS = ("epoch", *CLOCKS)


@dataclass
class MemoryPoint:
    """One memory of one group at one evaluation epoch, with the group's mean clocks there."""

    epoch: int
    value: float  # radial: mean slope over seeds; directional: mean cosine; accuracy: debiased pp
    lo: float  # 95% interval (nan: fewer than two seeds, or too few for the spread's rule)
    hi: float
    seeds: int
    clock_sgd: float
    clock_l2: float
    clock_adapt: float


@dataclass
class HalfLife:
    """When one memory of one group first fell to half its initial value."""

    memory: str
    reached: bool  # the group has a half-life within the horizon
    initial: float  # the memory at the reference epoch
    reference_epoch: int  # 0, or the epoch of its peak for accuracy memory
    epoch: float = NAN
    epoch_lo: float = NAN
    epoch_hi: float = NAN
    clock_sgd: float = NAN  # nan also when that clock never moved in this group
    clock_sgd_lo: float = NAN
    clock_sgd_hi: float = NAN
    clock_l2: float = NAN
    clock_l2_lo: float = NAN
    clock_l2_hi: float = NAN
    clock_adapt: float = NAN
    clock_adapt_lo: float = NAN
    clock_adapt_hi: float = NAN
    seeds: int = 0  # seeds whose memory fell to half (accuracy: fewer trained runs of best and worst sigma)
    never: int = 0  # seeds that did not fall to half within the horizon
    horizon_epoch: int = 0  # the last evaluated epoch, and the clocks reached there
    horizon_clock_sgd: float = NAN
    horizon_clock_l2: float = NAN
    horizon_clock_adapt: float = NAN
    note: str = ""

    def value(self, unit: str) -> tuple[float, float, float]:
        """(estimate, low, high) in ``unit``: ``epoch`` or a clock name."""
        return getattr(self, unit), getattr(self, f"{unit}_lo"), getattr(self, f"{unit}_hi")


@dataclass
class GroupForgetting:
    group: str
    #: memory -> its points, by epoch
    curves: dict[str, list[MemoryPoint]] = field(default_factory=dict)
    #: memory -> its half-life
    half_lives: dict[str, HalfLife] = field(default_factory=dict)
    #: memory (radial, directional) -> seed -> unit -> that seed's half-life (only seeds that crossed)
    seed_half_lives: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)


# -- crossings ------------------------------------------------------------------------------


def first_crossing(
    epochs: Sequence[float], values: Sequence[float], threshold: float, start: float = 0.0
) -> float | None:
    """The epoch at which ``values`` first falls to ``threshold`` or below, from epoch ``start``
    on, interpolated linearly between the two evaluation points that bracket the crossing;
    ``None`` if it never does. Points whose value is nan are skipped; a series already at or
    below the threshold at its first point crosses there."""
    points = [(e, v) for e, v in zip(epochs, values) if e >= start and not math.isnan(v)]
    if points and points[0][1] <= threshold:
        return points[0][0]
    for (e0, before), (e1, after) in zip(points, points[1:]):
        if after <= threshold:
            return e0 + (before - threshold) / (before - after) * (e1 - e0)  # before > threshold >= after
    return None


def at_epoch(epoch: float, epochs: Sequence[float], series: Sequence[float]) -> float:
    """``series`` (a clock, say) read at a fractional epoch, linearly between evaluation points."""
    import numpy as np

    known = [(e, v) for e, v in zip(epochs, series) if not math.isnan(v)]
    if not known:
        return NAN
    xs, ys = zip(*known)
    return float(np.interp(epoch, xs, ys))


def log_interval(values: list[float]) -> tuple[float, float, float]:
    """Geometric mean of positive values and its t interval over them, taken in log units."""
    if not values or any(v <= 0 or math.isnan(v) for v in values):
        return NAN, NAN, NAN
    logs = [math.log(v) for v in values]
    low, high = mean_interval(logs)
    return math.exp(sum(logs) / len(logs)), math.exp(low), math.exp(high)


# -- per-seed memories ----------------------------------------------------------------------


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys on xs; nan with fewer than two distinct xs."""
    if len(set(xs)) < 2:
        return NAN
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def radial_by_seed(cells: list[CellRecord], epochs: list[int]) -> dict[int, list[float]]:
    """Per seed, the slope of log ||W_t|| on log sigma at each epoch (nan where fewer than two
    positive sigmas of that seed have a norm)."""
    out = {}
    for seed in sorted({c.config.seed for c in cells}):
        mine = [c for c in cells if c.config.seed == seed and c.config.sigma > 0]
        norms = [dict(c.histories.get(WEIGHT_NORM, ())) for c in mine]
        row = []
        for epoch in epochs:
            points = [
                (math.log(c.config.sigma), math.log(n[epoch])) for c, n in zip(mine, norms) if n.get(epoch, 0) > 0
            ]
            row.append(_slope(*zip(*points)) if len(points) >= 2 else NAN)
        out[seed] = row
    return out


def _mean_by_epoch(cells: Iterable[CellRecord], metric: str, epochs: list[int]) -> list[float]:
    """The mean of ``metric``'s history over ``cells`` at each epoch (nan where none has a value)."""
    histories = [dict(c.histories.get(metric, ())) for c in cells]
    values = [[h[epoch] for h in histories if epoch in h and not math.isnan(h[epoch])] for epoch in epochs]
    return [sum(known) / len(known) if known else NAN for known in values]


def directional_by_seed(cells: list[CellRecord], epochs: list[int]) -> dict[int, list[float]]:
    """Per seed, the mean init_cosine over the seed's runs at each epoch."""
    seeds = sorted({c.config.seed for c in cells})
    return {seed: _mean_by_epoch((c for c in cells if c.config.seed == seed), INIT_COSINE, epochs) for seed in seeds}


def accuracy_at(cells: list[CellRecord], epoch: int) -> dict[float, dict[int, float]]:
    """Test accuracy (pp) by sigma and seed at ``epoch``: the spread's table at that epoch."""
    table: dict[float, dict[int, float]] = {}
    for cell in cells:
        value = dict(cell.histories.get(TEST_ACC, ())).get(epoch, NAN)
        if not math.isnan(value):
            table.setdefault(cell.config.sigma, {})[cell.config.seed] = 100 * value
    return table


# -- a group --------------------------------------------------------------------------------


def _over_seeds(by_seed: dict[int, list[float]], index: int) -> tuple[float, float, float, int]:
    values = [row[index] for row in by_seed.values() if not math.isnan(row[index])]
    if not values:
        return NAN, NAN, NAN, 0
    return sum(values) / len(values), *mean_interval(values), len(values)


def _horizon(epochs: list[int], clocks: dict[str, list[float]]) -> dict[str, Any]:
    return {
        "horizon_epoch": epochs[-1] if epochs else 0,
        **{f"horizon_{c}": (clocks[c][-1] if epochs else NAN) for c in CLOCKS},
    }


def _crossing_units(epoch: float, epochs: list[int], clocks: dict[str, list[float]]) -> dict[str, float]:
    """A crossing's epoch and each clock there; a clock that has not moved by then reads nan."""
    read = {clock: at_epoch(epoch, epochs, clocks[clock]) for clock in CLOCKS}
    return {"epoch": epoch, **{clock: value if value > 0 else NAN for clock, value in read.items()}}


def seed_half_lives(
    by_seed: dict[int, list[float]], epochs: list[int], clocks: dict[str, list[float]]
) -> tuple[dict[int, dict[str, float]], list[int], str]:
    """Per seed that crossed, its half-life in every unit; the seeds that never did; a note on
    seeds left out (no value at epoch 0, nothing to forget)."""
    crossed, never, skipped = {}, [], []
    for seed, row in by_seed.items():
        if not epochs or epochs[0] != 0 or math.isnan(row[0]) or row[0] <= 0:
            skipped.append(seed)
            continue
        found = first_crossing(epochs, row, row[0] / 2)
        if found is None:
            never.append(seed)
        else:
            crossed[seed] = _crossing_units(found, epochs, clocks)
    note = f"seed(s) {', '.join(map(str, skipped))} left out: no positive value at epoch 0" if skipped else ""
    return crossed, never, note


def per_seed_half_life(
    memory: str, by_seed: dict[int, list[float]], epochs: list[int], clocks: dict[str, list[float]]
) -> tuple[HalfLife, dict[int, dict[str, float]]]:
    crossed, never, note = seed_half_lives(by_seed, epochs, clocks)
    initial = _over_seeds(by_seed, 0)[0] if epochs and epochs[0] == 0 else NAN
    base: dict[str, Any] = dict(
        memory=memory,
        initial=initial,
        reference_epoch=0,
        seeds=len(crossed),
        never=len(never),
        **_horizon(epochs, clocks),
    )
    notes = [note] if note else []
    if not crossed:
        reason = "no seed has a value at epoch 0" if not never else "not within the horizon"
        return HalfLife(reached=False, note="; ".join([reason, *notes]), **base), crossed
    if never:
        notes.insert(0, f"{len(never)} of {len(never) + len(crossed)} seeds did not fall to half within the horizon")
        return HalfLife(reached=False, note="; ".join(notes), **base), crossed
    figures: dict[str, Any] = {}
    for unit in UNITS:
        estimate, low, high = log_interval([units[unit] for units in crossed.values()])
        figures.update({unit: estimate, f"{unit}_lo": low, f"{unit}_hi": high})
    if len(crossed) < 2:
        notes.append("one seed: no interval")
    return HalfLife(reached=True, note="; ".join(notes), **base, **figures), crossed


def accuracy_half_life(points: list[MemoryPoint], epochs: list[int], clocks: dict[str, list[float]]) -> HalfLife:
    """Half-life of the debiased spread from its peak after epoch 0; interval where its 95% band
    crosses the same line after the peak."""
    horizon = _horizon(epochs, clocks)
    trained = [i for i, p in enumerate(points) if p.epoch >= 1 and not math.isnan(p.value)]
    if not trained:
        return HalfLife("accuracy", False, NAN, 1, note="no debiased spread after epoch 0", **horizon)
    start = max(trained, key=lambda i: points[i].value)  # the first of equal peaks
    initial = points[start].value
    base: dict[str, Any] = dict(
        memory="accuracy", initial=initial, reference_epoch=points[start].epoch, seeds=points[start].seeds, **horizon
    )
    if initial <= 0:
        return HalfLife(
            reached=False, note=f"no accuracy memory to forget (largest debiased spread {initial:+.2f} pp)", **base
        )
    threshold = initial / 2

    def crossing(attribute: str) -> dict[str, float] | None:
        found = first_crossing(
            [p.epoch for p in points], [getattr(p, attribute) for p in points], threshold, points[start].epoch
        )
        return None if found is None else _crossing_units(found, epochs, clocks)

    estimate, low, high = crossing("value"), crossing("lo"), crossing("hi")
    if estimate is None:
        still = " (its peak is the last epoch: still forming)" if start == len(points) - 1 else ""
        return HalfLife(reached=False, note="not within the horizon" + still, **base)
    figures: dict[str, Any] = {unit: estimate[unit] for unit in UNITS}
    notes = []
    if math.isnan(points[start].lo):
        notes.append("no interval: the spread at its peak has none")
    else:
        for unit in UNITS:
            figures[f"{unit}_lo"] = low[unit] if low else NAN
            figures[f"{unit}_hi"] = high[unit] if high else NAN
        if high is None:
            notes.append("interval open above: its upper band stays above half within the horizon")
    return HalfLife(reached=True, note="; ".join(notes), **base, **figures)


def group_forgetting(group: str, cells: Iterable[CellRecord], accuracy: bool = True) -> GroupForgetting:
    """Every memory of one group over its epochs, and their half-lives (trained cells only).
    ``accuracy=False`` leaves accuracy memory out (a debiased spread per epoch is the slow part)."""
    cells = [c for c in cells if c.trained and c.histories]
    epochs = sorted(
        {epoch for c in cells for key in (WEIGHT_NORM, INIT_COSINE, TEST_ACC) for epoch, _ in c.histories.get(key, ())}
    )
    clocks = {clock: _mean_by_epoch(cells, clock, epochs) for clock in CLOCKS}
    result = GroupForgetting(group)
    if not epochs:
        return result

    def point(i: int, value: float, low: float, high: float, seeds: int) -> MemoryPoint:
        return MemoryPoint(epochs[i], value, low, high, seeds, *(clocks[c][i] for c in CLOCKS))

    for memory, by_seed in (
        ("radial", radial_by_seed(cells, epochs)),
        ("directional", directional_by_seed(cells, epochs)),
    ):
        curve = [point(i, *_over_seeds(by_seed, i)) for i in range(len(epochs))]
        if all(math.isnan(p.value) for p in curve):
            continue
        result.curves[memory] = curve
        result.half_lives[memory], result.seed_half_lives[memory] = per_seed_half_life(memory, by_seed, epochs, clocks)
    spreads = []
    for i, epoch in enumerate(epochs if accuracy else ()):
        table = accuracy_at(cells, epoch)
        if len(table) >= 2:
            spread = cross_fit_spread(table)
            spreads.append(point(i, spread.estimate, spread.lo, spread.hi, spread.seeds))
    if any(not math.isnan(p.value) for p in spreads):
        result.curves["accuracy"] = spreads
        result.half_lives["accuracy"] = accuracy_half_life(spreads, epochs, clocks)
    return result


def build_forgetting(by_group: Mapping[str, list[CellRecord]], accuracy: bool = True) -> dict[str, GroupForgetting]:
    """``group_forgetting`` of every group that has histories, by group label."""
    found = {group: group_forgetting(group, by_group[group], accuracy) for group in sorted(by_group)}
    return {group: forgetting for group, forgetting in found.items() if forgetting.curves}


# -- as the parent run logs them ------------------------------------------------------------


def half_life_metrics(forgetting: Mapping[str, GroupForgetting]) -> dict[str, float]:
    """``half_life_<memory>_<unit>_<group suffix>`` of every half-life reached (unit: epoch or a clock)."""
    out = {}
    for group, found in forgetting.items():
        for memory, half in found.half_lives.items():
            for unit in UNITS:
                value = getattr(half, unit)
                if half.reached and not math.isnan(value):
                    out[f"half_life_{memory}_{unit}_{metric_suffix(group)}"] = float(value)
    return out
