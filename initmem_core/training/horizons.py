"""Horizons set by a clock: ``--until clock_l2=2.0`` trains the fewest epochs whose final T_L2 reaches 2.0.

The clocks (``training.clocks``) are known once the training set's size is: they follow from the
schedule (a cosine spans the whole run, so the number of epochs changes every step's rate), the
plan's ``StepRule`` and the batches of an epoch (``ceil(n / b)``, the last one smaller).
``final_clocks`` replays them step by step with the very calls the training loop makes, in the
same order, so its clocks are bit-identical to the ones the run logs. ``epochs_until`` searches
the fewest epochs whose final clock reaches the target (each clock grows with the number of
epochs under every schedule); a clock within ``TOLERANCE`` (relative) below its target has
reached it, since a float sum of equal steps can land one rounding short.

``horizon`` is applied once per run by ``training.plan``, and to a sweep's cells before anything
runs (``initmem sweep --dry-run``); a search is kept per schedule, rule, size and target, so the
cells of a group (which differ in sigma and seed) search once. Imports no torch.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from initmem_core.config import MAX_EPOCHS, RunConfig, parse_until
from initmem_core.errors import ConfigError
from initmem_core.training.clocks import ForgettingClocks, StepRule
from initmem_core.training.schedules import lr_multiplier, warmup_steps
from initmem_core.vocabulary import CLOCK_L2, CLOCK_SGD, CLOCK_SYMBOLS, CLOCKS

#: A clock this close below its target (relative) has reached it.
TOLERANCE = 1e-9
#: The most optimizer steps one search replays (about 3 s): past it the epochs a
#: target needs are only bounded from below.
SEARCH_STEPS = 1_000_000


# -- what a step counts -----------------------------------------------------------------------


def epoch_batches(n_train: int, batch_size: int) -> tuple[int, ...]:
    """The sizes of an epoch's batches as the training loader yields them (it keeps a smaller
    last batch): ``ceil(n_train / batch_size)`` batches."""
    if n_train < 1 or batch_size < 1:
        raise ValueError(f"n_train and batch_size must be 1 or more, got {n_train} and {batch_size}")
    full, rest = divmod(int(n_train), int(batch_size))
    return (int(batch_size),) * full + ((rest,) if rest else ())


@dataclass(frozen=True)
class Schedule:
    """The learning-rate schedule of a run, as ``training.schedules`` reads it from a config."""

    schedule: str = "constant"
    epochs: int = 1
    warmup_epochs: float = 0.0
    lr_step_epochs: int = 30
    lr_gamma: float = 0.1

    @classmethod
    def of(cls, config: RunConfig) -> Schedule:
        """The config's fields of these names."""
        return cls(*(getattr(config, field.name) for field in dataclasses.fields(cls)))


# -- the clocks of a run, replayed --------------------------------------------------------------


def clocks_by_epoch(
    schedule: Schedule,
    rule: StepRule,
    batches: Sequence[int],
    epochs: int | None = None,
    stop_at: tuple[str, float] | None = None,
) -> list[dict[str, float]]:
    """The clocks at the end of each epoch of a run of ``epochs`` (default ``schedule.epochs``)
    epochs, as its history logs them (``clock_sgd``, ``clock_l2``, ``clock_adapt``).
    ``stop_at=(clock, target)``: stop after the first epoch whose clock reaches ``target``."""
    epochs = schedule.epochs if epochs is None else int(epochs)
    schedule = dataclasses.replace(schedule, epochs=epochs)
    steps_per_epoch = len(batches)
    clocks, rows, step = ForgettingClocks(), [], 0
    for _ in range(epochs):
        for batch_size in batches:
            clocks.tick(rule.eta(lr_multiplier(schedule, step, steps_per_epoch)), batch_size, rule.shrink)
            step += 1
        rows.append(clocks.as_metrics())
        if stop_at is not None and reached(rows[-1][stop_at[0]], stop_at[1]):
            break
    return rows


def final_clocks(
    schedule: Schedule, rule: StepRule, batches: Sequence[int], epochs: int | None = None
) -> dict[str, float]:
    """The clocks a run of ``epochs`` epochs ends with (``{}`` for 0 epochs)."""
    rows = clocks_by_epoch(schedule, rule, batches, epochs)
    return rows[-1] if rows else ForgettingClocks().as_metrics()


def reached(value: float, target: float) -> bool:
    return value >= target * (1.0 - TOLERANCE)


@dataclass(frozen=True)
class Search:
    """What ``epochs_until`` found: ``epochs`` (``None``: not within ``limit``), and, when it is
    ``None``, whether the clock can reach the target at all (``bounded``: it tends to ``limit_value``)."""

    epochs: int | None
    bounded: bool = False
    limit_value: float = math.inf
    searched_to: int = 0  # the most epochs known not to reach the target


def epochs_until(
    target: float,
    clock: str,
    schedule: Schedule,
    rule: StepRule,
    batches: Sequence[int],
    *,
    limit: int = MAX_EPOCHS,
    max_steps: int = SEARCH_STEPS,
) -> Search:
    """The fewest epochs (at most ``limit``) whose final ``clock`` reaches ``target`` under
    ``schedule`` (its own ``epochs`` is ignored), ``rule`` and an epoch of ``batches``.

    ``constant`` and ``step``: one pass (a step's rate does not depend on the run's length).
    ``cosine``: doubling from the constant schedule's answer (a lower bound: cosine never exceeds
    1), then interpolating and bisecting. At most ``max_steps`` steps are replayed; past that
    ``epochs`` is ``None`` with ``searched_to`` the most epochs known to fall short.
    """
    if clock not in CLOCKS:
        raise ValueError(f"unknown clock {clock!r}; valid clocks: {', '.join(CLOCKS)}")
    steps_per_epoch = len(batches)
    bound = clock_limit(clock, schedule, rule, batches)
    if not reached(bound, target):
        return Search(None, bounded=True, limit_value=bound)
    if schedule.schedule != "cosine":
        epochs = min(limit, max(1, max_steps // steps_per_epoch))
        rows = clocks_by_epoch(schedule, rule, batches, epochs, stop_at=(clock, target))
        if reached(rows[-1][clock], target):
            return Search(len(rows))
        return Search(None, searched_to=len(rows))
    # cosine: the final clock of an E-epoch run, nondecreasing in E, is at least the constant
    # schedule's (whose answer is thus a lower bound); double, then narrow down.
    spent = 0

    def clock_after(epochs: int) -> float:
        nonlocal spent
        spent += epochs * steps_per_epoch
        return final_clocks(schedule, rule, batches, epochs)[clock]

    lower = epochs_until(
        target,
        clock,
        dataclasses.replace(schedule, schedule="constant"),
        rule,
        batches,
        limit=limit,
        max_steps=max_steps,
    )
    if lower.epochs is None:
        return Search(None, searched_to=lower.searched_to)
    low, high = lower.epochs - 1, lower.epochs  # low falls short (or is 0); high is to test
    low_value, high_value = (clock_after(low) if low else 0.0), clock_after(high)
    while not reached(high_value, target):
        if high >= limit or spent + 2 * high * steps_per_epoch > max_steps:
            return Search(None, searched_to=high)
        low, low_value = high, high_value
        high = min(limit, 2 * high)
        high_value = clock_after(high)
    bisect = False
    while high - low > 1:
        # The final clock is nearly linear in the run's length: interpolating lands within an
        # epoch or two; every other guess bisects, so the search ends however f bends.
        if bisect or high_value <= low_value:
            middle = (low + high) // 2
        else:
            guess = low + math.ceil((target - low_value) / (high_value - low_value) * (high - low))
            middle = min(high - 1, max(low + 1, guess))
        bisect = not bisect
        value = clock_after(middle)
        if reached(value, target):
            high, high_value = middle, value
        else:
            low, low_value = middle, value
    return Search(high)


def clock_limit(clock: str, schedule: Schedule, rule: StepRule, batches: Sequence[int]) -> float:
    """What ``clock`` tends to as the run grows: infinite, except under a step schedule that
    decays (``lr_gamma < 1``: a geometric series) or a clock with nothing to count (T_L2 with
    lambda 0). 0 when every step's ``eta`` is 0."""
    if rule.eta(1.0) == 0 or (clock == CLOCK_L2 and rule.shrink == 0):
        return 0.0
    if schedule.schedule != "step" or schedule.lr_gamma >= 1:
        return math.inf
    # From the first block of lr_step_epochs epochs after the warm-up on, block i's steps all
    # have multiplier gamma**i: T_adapt and T_L2 add gamma**i, T_SGD gamma**(2i), times block 0's.
    block = schedule.lr_step_epochs
    warmup_epochs = math.ceil(warmup_steps(schedule, len(batches)) / len(batches))
    start = block * math.ceil(warmup_epochs / block)
    before = final_clocks(schedule, rule, batches, start)[clock]
    flat = dataclasses.replace(schedule, schedule="constant", warmup_epochs=0.0)  # every step at multiplier 1
    per_block = final_clocks(flat, rule, batches, 1)[clock] * block
    ratio = schedule.lr_gamma ** (2 if clock == CLOCK_SGD else 1)
    first = start // block
    return before + per_block * ratio**first / (1 - ratio)


# -- a run's horizon --------------------------------------------------------------------------


@dataclass(frozen=True)
class Horizon:
    """The epochs a config trains and the clocks it ends with; ``until``: the target that set the
    epochs (``None``: ``--epochs`` did). With ``--patience`` it is adaptive: ``epochs`` is the cap,
    ``min_epochs`` the first epoch reaching the ``--until`` target, before which it does not stop."""

    epochs: int
    clocks: dict[str, float]
    steps_per_epoch: int
    until: tuple[str, float] | None = None
    min_epochs: int = 0


def horizon(config: RunConfig, n_train: int, rule: StepRule) -> Horizon:
    """The epochs ``config`` trains on a training set of ``n_train`` examples and its final clocks:
    ``--epochs``, or with ``--until`` the fewest epochs whose final clock reaches the target, with
    ``--epochs`` as the cap (with ``--patience``: the cap, that target's epoch its ``min_epochs``).
    ``ConfigError`` (one line: the clock reached at the cap, the epochs needed, how to fix it) when
    the cap is too short or the clock cannot reach the target."""
    target = parse_until(config.until)
    hint = _how_to_grow(target[0], config) if target else ""
    schedule = Schedule.of(config)
    found = _horizon(schedule, rule, int(n_train), int(config.batch_size), config.until, hint)
    if config.patience and found.until:  # adaptive: the cap's horizon, stopping no earlier than the target
        return _adaptive(schedule, rule, int(n_train), int(config.batch_size), found.until)
    return found


@functools.lru_cache(maxsize=256)
def _adaptive(schedule: Schedule, rule: StepRule, n_train: int, batch_size: int, until: tuple[str, float]) -> Horizon:
    """``--patience``: the cap's horizon; ``min_epochs``, the first epoch reaching ``until`` under its schedule."""
    batches = epoch_batches(n_train, batch_size)
    reaching = len(clocks_by_epoch(schedule, rule, batches, stop_at=until))
    return Horizon(schedule.epochs, final_clocks(schedule, rule, batches), len(batches), until, reaching)


@functools.lru_cache(maxsize=256)
def _horizon(schedule: Schedule, rule: StepRule, n_train: int, batch_size: int, until: str, hint: str) -> Horizon:
    """``horizon`` without ``--patience``, from what it reads of the config (``hint``: how to make the clock grow)."""
    batches = epoch_batches(n_train, batch_size)
    target = parse_until(until)
    if target is None:
        return Horizon(schedule.epochs, final_clocks(schedule, rule, batches), len(batches))
    clock, value = target
    name = f"{clock} ({CLOCK_SYMBOLS[clock]})"
    cap = schedule.epochs
    found = epochs_until(value, clock, schedule, rule, batches, limit=cap)
    if found.epochs is not None:
        return Horizon(found.epochs, final_clocks(schedule, rule, batches, found.epochs), len(batches), target)
    if found.bounded and found.limit_value == 0:
        raise ConfigError(f"--until {until}: {name} stays 0 in this run; {hint}")
    if found.bounded:
        raise ConfigError(
            f"--until {until}: {name} cannot reach {value:g} under this run's settings: "
            f"it tends to {found.limit_value:.4g} however long the run; {hint}"
        )
    if found.searched_to < cap:  # the search stopped short of the cap (SEARCH_STEPS)
        raise ConfigError(
            f"--until {until}: {name} needs more than {found.searched_to} epochs "
            f"({found.searched_to * len(batches):,} steps) to reach {value:g}; lower the target"
        )
    at_cap = final_clocks(schedule, rule, batches, cap)[clock]
    beyond = epochs_until(value, clock, schedule, rule, batches)
    needed = (
        f"it needs {beyond.epochs} epochs; raise --epochs to at least {beyond.epochs}"
        if beyond.epochs
        else f"it needs more than {beyond.searched_to} epochs; raise --epochs or lower the target"
    )
    raise ConfigError(f"--until {until}: {cap} epochs (--epochs, the cap) reach only {clock}={at_cap:.4g}; {needed}")


def _how_to_grow(clock: str, config: RunConfig) -> str:
    if clock == CLOCK_L2 and config.l2 == 0 and config.weight_decay == 0:
        return "set --l2 or --weight-decay above 0 (T_L2 counts lambda * sum eta)"
    if config.schedule == "step":
        return "raise --lr-gamma, --lr-step-epochs or --lr, or lower the target"
    return "raise --lr or lower the target"
