"""``initmem sweep --dry-run``: what a launch of this grid would do now, read from the tracking store
without writing to it: which cells are done, which run in another live sweep process, which would
run, and their cost alone; a grid the store's sweep of that name was not launched with is refused
in one line, as a launch refuses it (``initmem_core.sweep.identity``), before any plan is printed.
Imported by ``cli.sweep`` only for a dry run: what it imports stays out of the CLI's start-up.

The regime forecast names only the claims the sweep's groups can test (a claim's declared axis,
``contracts.ClaimInfo.axis``, must vary between them), and, for a group short of its mechanism's
threshold, the epochs (or the ``--until`` target) that would reach it (``training.horizons``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from initmem_core.config import HASHED, RunConfig
from initmem_core.errors import ConfigError
from initmem_core.report.claim_groups import UNKNOWN_FAMILY, mechanism_clock
from initmem_core.report.claims import claim_specs
from initmem_core.report.regime import CLOCK_THRESHOLDS
from initmem_core.sweep.identity import GridIdentity
from initmem_core.tracking.cells import LEASES_FOLDER, CellLeases
from initmem_core.tracking.client import open_client
from initmem_core.tracking.records import child_runs, find_parent
from initmem_core.tracking.uris import resolve_tracking_uri, sqlite_path, store_folder
from initmem_core.training.clocks import CONVENTION_FAMILIES
from initmem_core.training.horizons import Schedule, epoch_batches, epochs_until
from initmem_core.training.plan import RunPlan, training_set_size
from initmem_core.vocabulary import CONFIG_HASH_TAG, DIVERGED_TAG, FAILED, FINISHED

#: Each cell's state in the store, as the dry run's table and JSON name it.
DONE, ELSEWHERE, TO_RUN = "done", "running elsewhere", "to run"
#: The settings that tell a sweep's cells apart but never its groups.
NOT_GROUPS = ("sigma", "seed")


@dataclass
class StoreState:
    """Each cell's state (``DONE``, ``ELSEWHERE``, ``TO_RUN``), in cell order; ``note``: why the
    store could not be read (every cell is then counted as to run)."""

    states: list[str]
    note: str = ""
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.counts = {state: self.states.count(state) for state in (DONE, ELSEWHERE, TO_RUN)}

    def line(self, groups: int) -> str:
        done, elsewhere, to_run = (self.counts[state] for state in (DONE, ELSEWHERE, TO_RUN))
        text = f"{len(self.states)} cells in {groups} group(s): {done} done, {elsewhere} running elsewhere, "
        return text + f"{to_run} to run" + (f" ({self.note})" if self.note else "")


def read_store(plan, tracking_uri: str | None, experiment: str, retry_failed: bool, extend: bool) -> StoreState:
    """The state of each of ``plan``'s cells in the store (nothing is written there). A changed
    grid under the sweep's name raises the launch's own ``ConfigError``. A cell is done as a
    launch would skip it: FINISHED, or diverged (unless ``retry_failed``); running elsewhere when
    another live sweep process holds its lease (``tracking.cells.CellLeases``)."""

    uri = resolve_tracking_uri(tracking_uri)
    hashes = [cell.config_hash for cell in plan.plans]
    nothing = StoreState([TO_RUN] * len(hashes))
    database = sqlite_path(uri)
    if database is not None and not database.exists():
        return nothing  # no store yet: nothing ran
    try:
        client = open_client(uri, create=False)
        found = client.get_experiment_by_name(experiment)
        parent = find_parent(client, found.experiment_id, plan.name) if found is not None else None
    except ConfigError as error:  # a server that does not answer: the plan still stands
        return StoreState(nothing.states, f"the store was not read: {error}")
    if parent is None:
        return nothing
    GridIdentity.of(plan.cells).admit(plan.name, dict(parent.data.tags), dict(parent.data.params), extend)
    done = set()
    for run in child_runs(client, parent):
        diverged = run.info.status == FAILED and run.data.tags.get(DIVERGED_TAG) == "true"
        if run.info.status == FINISHED or (diverged and not retry_failed):
            done.add(run.data.tags.get(CONFIG_HASH_TAG, ""))
    leases = CellLeases(store_folder(uri) / LEASES_FOLDER)
    held = set()
    if leases.folder.is_dir():
        for key in set(hashes) - done:
            if (leases.folder / f"{key}.lock").exists() and not leases.take(key):
                held.add(key)
        leases.release()  # each lock taken here only to see that nobody holds it
    return StoreState([DONE if key in done else ELSEWHERE if key in held else TO_RUN for key in hashes])


def varying_settings(cells: list[RunConfig]) -> set[str]:
    """The hashed settings whose values differ between the sweep's groups (sigma and seed aside)."""
    return {name for name in HASHED if name not in NOT_GROUPS and len({repr(getattr(c, name)) for c in cells}) > 1}


def forecast_claims(cells: list[RunConfig], registry=None) -> dict[str, list[str]]:
    """The registered claims with a mechanism clock whose declared axis the sweep's groups vary,
    by that clock (``report.claims.claim_specs``): the only claims its forecast can speak for."""

    varying = varying_settings(cells)
    by_clock: dict[str, list[str]] = {}
    for spec in claim_specs(registry):
        info = spec.info
        if info.clock and varying & set(info.axis):
            by_clock.setdefault(info.clock, []).append(spec.name)
    return by_clock


@dataclass(frozen=True)
class Needed:
    """What a group short of its threshold would need: ``epochs`` (``None``: not found, ``why``
    says why), or the ``until`` target that trains each cell as long as it needs."""

    epochs: int | None
    until: str
    why: str = ""

    def text(self) -> str:
        if self.epochs is None:
            return self.why
        return f"needs {self.epochs} epochs (--epochs {self.epochs}, or --until {self.until})"


#: The most optimizer steps the search for a short group's epochs replays (about a second here).
SEARCH_STEPS = 100_000


def needed(plan, forecast) -> Needed | None:
    """The fewest epochs after which every cell of ``forecast``'s group reaches its threshold, on
    the clock of its own steps (``training.horizons.epochs_until``, up to ``SEARCH_STEPS``);
    ``None``: its training set cannot be sized here."""

    until = f"{forecast.clock}={forecast.threshold:g}"
    searched: dict[tuple, Any] = {}
    for cell, group in zip(plan.plans, plan.groups):
        if group != forecast.group:
            continue
        try:
            size = cell.n_train or training_set_size(cell.config, cell.components["dataset"])
        except ConfigError:
            return None
        key = (Schedule.of(cell.config), cell.rule, size, cell.config.batch_size)  # sigma and seed aside
        if key not in searched:
            batches = epoch_batches(size, cell.config.batch_size)
            searched[key] = epochs_until(
                forecast.threshold, forecast.clock, key[0], cell.rule, batches, max_steps=SEARCH_STEPS
            )
        found = searched[key]
        if found.epochs is None:
            why = (
                f"no horizon reaches it: {forecast.clock} tends to {found.limit_value:.3g} under this schedule"
                if found.bounded
                else f"needs more than {found.searched_to:,} epochs (--until {until} finds how many)"
            )
            return Needed(None, until, why)
    epochs = [found.epochs for found in searched.values()]
    return Needed(max(epochs), until) if epochs else None


def work_of(cells: list[RunConfig], horizons) -> dict[str, Any]:
    """The work as numbers, and as text: optimizer steps when every cell's are known (``horizons``)
    or every cell fixes ``train_size`` (``None`` otherwise), and epochs."""
    known = bool(cells) and horizons is not None and all(h is not None for h in horizons)
    if known:
        steps, epochs = sum(h.epochs * h.steps_per_epoch for h in horizons), sum(h.epochs for h in horizons)
    else:
        sized = bool(cells) and all(c.train_size > 0 for c in cells)
        steps = sum(c.epochs * math.ceil(c.train_size / c.batch_size) for c in cells) if sized else None
        epochs = sum(c.epochs for c in cells)
    text = f"{steps:,} optimizer steps" if steps is not None else f"{epochs:,} epochs"
    return {"text": text if cells else "none", "optimizer_steps": steps, "epochs": epochs}


# -- the regime each planned group reaches --------------------------------------------------


@dataclass(frozen=True)
class ClockForecast:
    """Where a planned group's mechanism clock will end against its threshold (``report.regime.CLOCK_THRESHOLDS``)."""

    group: str
    clock: str  # the clock of the mechanism by which the group would forget (``mechanism_clock``)
    reached: float  # the smallest value any of its cells ends with (nan: not known before it runs)
    threshold: float

    @property
    def short(self) -> bool:
        """Short of the threshold: contradictions of its forgetting will read horizon short."""
        return not self.reached >= self.threshold


def clock_forecasts(
    groups: list[str], plans: list[RunPlan], clocks: list[dict[str, float] | None]
) -> list[ClockForecast]:
    """Per planned group (in first order), its mechanism's clock (by the family of the clock
    convention each cell's plan holds, ``RunPlan.convention``: what its run will log) and the least
    value its cells end with (``clocks``: per cell, from ``training.horizons``; None where unknown),
    against the threshold a contradiction needs."""
    clock_of: dict[str, str] = {}
    reached: dict[str, list[float]] = {}
    for group, plan, ends in zip(groups, plans, clocks):
        family = CONVENTION_FAMILIES.get(plan.convention, UNKNOWN_FAMILY)
        clock = clock_of.setdefault(group, mechanism_clock(plan.config, family))
        reached.setdefault(group, []).append(ends[clock] if ends and clock in ends else math.nan)
    forecasts = []
    for group, clock in clock_of.items():
        least = math.nan if any(math.isnan(v) for v in reached[group]) else min(reached[group])
        forecasts.append(ClockForecast(group, clock, least, CLOCK_THRESHOLDS[clock]))
    return forecasts
