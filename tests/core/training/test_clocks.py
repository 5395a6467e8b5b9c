"""The forgetting clocks (training/clocks.py) against sums written out by hand: the clocks' own sums,
and those of real runs: effective step eta/(1-beta) for heavy-ball momentum, lambda = --l2 +
--weight-decay, per optimizer convention, under each schedule."""

from __future__ import annotations

import math

import pytest

from initmem_core import run
from initmem_core.errors import ConfigError
from initmem_core.training.clocks import ForgettingClocks, check_convention, effective_step


def test_clocks_match_hand_computed_sums():
    clocks = ForgettingClocks()
    steps = [(0.1, 32), (0.1, 32), (0.05, 16)]  # (lr, batch size) per step
    for lr, b in steps:
        clocks.tick(lr, b, l2=1e-2)
    # T_SGD = sum eta^2 / b; T_L2 = lambda * sum eta; T_adapt = sum eta
    assert clocks.sgd == pytest.approx(0.01 / 32 + 0.01 / 32 + 0.0025 / 16)
    assert clocks.l2 == pytest.approx(1e-2 * 0.25)
    assert clocks.adapt == pytest.approx(0.25)
    assert clocks.as_metrics() == {"clock_sgd": clocks.sgd, "clock_l2": clocks.l2, "clock_adapt": clocks.adapt}


def test_l2_clock_stays_zero_without_l2():
    clocks = ForgettingClocks()
    clocks.tick(0.5, 8, l2=0.0)
    assert clocks.l2 == 0.0 and clocks.adapt == 0.5


# 64 training examples at b = 24: three steps an epoch, of 24, 24 and 16 examples.
DATA = dict(
    data="synthetic:1x8x8-c4-n64",
    arch="resnet20",
    batch_size=24,
    epochs=2,
    threads=1,
    tracking=False,
    checkpoint_every=0,
)
BATCHES = [24, 24, 16] * 2


def hand_rates(schedule: str, lr: float) -> list[float]:
    """The six rates applied, written out: step halves every epoch; cosine over T = 6 steps."""
    if schedule == "constant":
        return [lr] * 6
    if schedule == "step":  # lr_step_epochs=1, lr_gamma=0.5
        return [lr] * 3 + [lr / 2] * 3
    return [lr * 0.5 * (1 + math.cos(math.pi * k / 6)) for k in range(6)]


def hand_clocks(rates: list[float], divide: float, shrink: float) -> dict[str, float]:
    eta = [r / divide for r in rates]
    return {
        "clock_sgd": sum(e * e / b for e, b in zip(eta, BATCHES)),
        "clock_l2": shrink * sum(eta),
        "clock_adapt": sum(eta),
    }


def final_clocks(**config) -> dict[str, float]:
    last = run(**DATA, **config).history[-1]
    return {key: last[key] for key in ("clock_sgd", "clock_l2", "clock_adapt")}


@pytest.mark.parametrize("schedule", ["constant", "step", "cosine"])
@pytest.mark.parametrize("momentum, weight_decay, l2", [(0.0, 0.0, 0.0), (0.9, 1e-3, 0.0), (0.5, 0.0, 1e-2)])
def test_sgd_clocks_use_the_effective_step_and_every_shrinking_force(schedule, momentum, weight_decay, l2):
    config = dict(
        opt="sgd",
        lr=0.02,
        momentum=momentum,
        weight_decay=weight_decay,
        l2=l2,
        schedule=schedule,
        lr_step_epochs=1,
        lr_gamma=0.5,
    )
    expected = hand_clocks(hand_rates(schedule, 0.02), divide=1 - momentum, shrink=weight_decay + l2)
    assert final_clocks(**config) == pytest.approx(expected, rel=1e-9)


def test_momentum_09_makes_t_sgd_100x_and_t_adapt_10x_plain_sgd():
    plain = final_clocks(opt="sgd", lr=0.01)
    heavy = final_clocks(opt="sgd", lr=0.01, momentum=0.9)
    assert heavy["clock_sgd"] == pytest.approx(100 * plain["clock_sgd"], rel=1e-9)
    assert heavy["clock_adapt"] == pytest.approx(10 * plain["clock_adapt"], rel=1e-9)


@pytest.mark.parametrize("opt", ["adam", "adamw"])
def test_adaptive_momentum_is_an_average_so_the_step_is_lr_and_decay_reaches_t_l2(opt):
    # Adam's beta1 is an EMA: no 1/(1-beta) gain. Coupled (adam) or decoupled (adamw), decay counts.
    expected = hand_clocks(hand_rates("cosine", 1e-3), divide=1.0, shrink=0.05)
    assert final_clocks(opt=opt, lr=1e-3, weight_decay=0.05, schedule="cosine") == pytest.approx(expected, rel=1e-9)


def test_effective_step_reads_dampening_and_falls_back_to_lr_without_momentum():
    assert effective_step({"lr": 0.1, "momentum": 0.9, "dampening": 0.9}, "heavy-ball") == pytest.approx(0.1)
    assert effective_step({"lr": 0.1, "momentum": 0.75}, "heavy-ball") == pytest.approx(0.4)
    assert effective_step({"lr": 0.1}, "heavy-ball") == 0.1
    assert effective_step({"lr": 0.1, "momentum": 0.9}, "lr") == 0.1


def test_an_unknown_convention_is_one_clear_error():
    with pytest.raises(ConfigError, match="valid conventions: heavy-ball, lr"):
        check_convention("nesterov-ish", "my-opt")


def test_the_convention_is_logged_as_a_param():
    from initmem_core.tracking.tracker import MemoryTracker

    tracker = MemoryTracker()
    run(**{**DATA, "epochs": 1}, opt="adam", tracker=tracker)
    assert tracker.params["clock_convention"].startswith("lr:")
