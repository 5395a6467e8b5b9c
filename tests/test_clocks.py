"""The forgetting clocks against sums computed by hand."""

from __future__ import annotations

import pytest

from initmem_core.training.clocks import ForgettingClocks


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
