"""Learning-rate schedules: hand-checked multipliers and the LambdaLR step convention."""

from __future__ import annotations

import math

import pytest
import torch

from initmem_core import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.training.schedules import RateSchedule, lr_multiplier, total_steps, warmup_steps


def lr_multipliers(config, steps_per_epoch: int) -> list[float]:
    """``lr_multiplier`` at every step of the run, in order."""
    return [lr_multiplier(config, k, steps_per_epoch) for k in range(total_steps(config, steps_per_epoch))]


def test_constant():
    config = RunConfig(schedule="constant", epochs=3)
    assert lr_multipliers(config, 4) == [1.0] * 12


def test_step():
    config = RunConfig(schedule="step", epochs=7, lr_step_epochs=3, lr_gamma=0.1)
    spe = 2
    by_epoch = [lr_multiplier(config, epoch * spe + 1, spe) for epoch in range(7)]
    assert by_epoch == pytest.approx([1, 1, 1, 0.1, 0.1, 0.1, 0.01])
    assert lr_multiplier(config, 5, spe) == 1.0 and lr_multiplier(config, 6, spe) == pytest.approx(0.1)


def test_cosine():
    config = RunConfig(schedule="cosine", epochs=2)
    spe = 4  # T = 8 steps, progress k/8
    values = lr_multipliers(config, spe)
    assert values[0] == 1.0
    assert values[2] == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert values[4] == pytest.approx(0.5)
    assert values[7] == pytest.approx(0.5 * (1 + math.cos(7 * math.pi / 8)))
    assert lr_multiplier(config, 8, spe) == pytest.approx(0.0, abs=1e-12)  # past the end: clamped


def test_warmup_constant_and_cosine():
    spe = 5
    constant = RunConfig(schedule="constant", epochs=4, warmup_epochs=2)
    assert warmup_steps(constant, spe) == 10
    assert [lr_multiplier(constant, k, spe) for k in (0, 4, 9, 10, 19)] == pytest.approx([0.1, 0.5, 1, 1, 1])

    cosine = RunConfig(schedule="cosine", epochs=4, warmup_epochs=2)  # cosine over steps 10..19
    assert [lr_multiplier(cosine, k, spe) for k in (0, 9)] == pytest.approx([0.1, 1.0])
    assert lr_multiplier(cosine, 10, spe) == 1.0
    assert lr_multiplier(cosine, 15, spe) == pytest.approx(0.5)
    assert lr_multiplier(cosine, 12, spe) == pytest.approx(0.5 * (1 + math.cos(math.pi * 2 / 10)))


def test_warmup_step_schedule_and_fractional_warmup():
    config = RunConfig(schedule="step", epochs=6, warmup_epochs=0.5, lr_step_epochs=2, lr_gamma=0.5)
    spe = 4  # 2 warm-up steps
    assert [lr_multiplier(config, k, spe) for k in (0, 1, 2, 7, 8, 16)] == pytest.approx([0.5, 1, 1, 1, 0.5, 0.25])


def test_bad_inputs():
    with pytest.raises(ConfigError, match="--schedule"):
        lr_multiplier(RunConfig(schedule="linear"), 0, 1)
    with pytest.raises(ValueError):
        lr_multiplier(RunConfig(), 0, 0)


def test_the_schedule_applies_multiplier_k_at_optimizer_step_k_and_returns_it():
    config = RunConfig(schedule="cosine", epochs=2, warmup_epochs=1, lr=0.2)
    spe = 3
    param, other = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([{"params": [param]}, {"params": [other], "lr": 0.05}], lr=config.lr)
    scheduler = RateSchedule(optimizer, config, spe)
    used, returned = [], []
    for k in range(2 * spe):
        returned.append(scheduler.at(k))
        param.grad = torch.ones(1)
        before = param.item()
        optimizer.step()
        used.append(before - param.item())  # plain SGD with grad 1: the step is the lr used
        assert optimizer.param_groups[1]["lr"] == 0.05 * returned[-1]  # a group's own rate keeps its ratio
    assert returned == lr_multipliers(config, spe)  # the very values the clocks replay
    assert used == pytest.approx([config.lr * m for m in returned], rel=1e-5)
    assert used[0] == pytest.approx(0.2 / 3, rel=1e-5)
