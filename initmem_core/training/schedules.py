"""Learning-rate schedules as a pure function of the optimizer step.

``lr_multiplier(config, step, steps_per_epoch)`` is the factor applied to ``config.lr`` at
optimizer step ``step`` (0-based, counted over the whole run); the forgetting clocks
(``training.clocks``) are accumulated from exactly these values.

Schedules (``config.schedule``), with ``W = round(warmup_epochs * steps_per_epoch)`` warm-up
steps and ``T = epochs * steps_per_epoch`` steps in all:

- ``constant``: 1.
- ``step``: ``lr_gamma ** (epoch // lr_step_epochs)`` with ``epoch = step // steps_per_epoch``,
  epochs counted from the start of training (warm-up included).
- ``cosine``: ``0.5 * (1 + cos(pi * p))`` with ``p = (step - W) / (T - W)``, clamped to [0, 1]:
  1 at the first step after warm-up, decaying over the rest of training (the last step's
  multiplier is small but not 0; it reaches 0 only after the last step).

Warm-up (``W > 0``): for ``step < W`` the schedule's value is multiplied by
``(step + 1) / W``, a linear ramp from ``lr / W`` at step 0 to ``lr`` at step ``W - 1``.

``RateSchedule.at(k)`` applies it before the ``k``-th (0-based) ``optimizer.step()``: it sets every
param group's rate and returns the multiplier, the one value the step's update and its clocks
both take. Imports no torch.
"""

from __future__ import annotations

import math
from typing import Any

from initmem_core.errors import ConfigError

SCHEDULES = ("constant", "step", "cosine")


def warmup_steps(config: Any, steps_per_epoch: int) -> int:
    return int(round(float(config.warmup_epochs) * steps_per_epoch))


def total_steps(config: Any, steps_per_epoch: int) -> int:
    return int(config.epochs) * int(steps_per_epoch)


def lr_multiplier(config: Any, step: int, steps_per_epoch: int) -> float:
    """The factor on ``config.lr`` used by optimizer step ``step`` (0-based). See module doc."""
    if steps_per_epoch < 1:
        raise ValueError(f"steps_per_epoch must be >= 1, got {steps_per_epoch}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    schedule = config.schedule
    warmup = warmup_steps(config, steps_per_epoch)
    if schedule == "constant":
        value = 1.0
    elif schedule == "step":
        epoch = step // steps_per_epoch
        value = float(config.lr_gamma) ** (epoch // int(config.lr_step_epochs))
    elif schedule == "cosine":
        span = total_steps(config, steps_per_epoch) - warmup
        progress = (step - warmup) / span if span > 0 else 1.0
        progress = min(1.0, max(0.0, progress))
        value = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ConfigError(f"--schedule: unknown value '{schedule}'; valid values: {', '.join(SCHEDULES)}")
    if step < warmup:
        value *= (step + 1) / warmup
    return value


def lr_match_factor(config: Any) -> float:
    """``--lr-match-sigma REF``: the factor ``(sigma / REF)**2`` on the scale-invariant kernels'
    rate (1 when off). See ``initmem_core.training.effective_step``."""
    ref = float(config.lr_match_sigma)
    ratio = float(config.sigma) / ref if ref else 1.0
    return ratio * ratio


class RateSchedule:
    """The run's schedule on its optimizer. ``at(step)`` sets each param group's ``lr`` to the rate
    it was built with times ``lr_multiplier(step)`` (groups with their own rates keep their
    ratios) and returns that multiplier: the loop calls it before every ``optimizer.step()`` and
    ticks the clocks on what it returns. A function of the step alone, so a resumed run needs no
    state of it."""

    def __init__(self, optimizer: Any, config: Any, steps_per_epoch: int):
        self.optimizer, self.config, self.steps_per_epoch = optimizer, config, steps_per_epoch
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.at(0)  # fails early on a bad schedule or steps_per_epoch

    def at(self, step: int) -> float:
        multiplier = lr_multiplier(self.config, step, self.steps_per_epoch)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * multiplier
        return multiplier
