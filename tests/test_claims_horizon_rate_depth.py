"""The claims on training longer, a larger rate and depth, on hand-made sweeps:
each holds where the numbers say so, fails where they say the opposite, and reads only the groups
that differ in the one setting it is about."""

from __future__ import annotations

import math

import pytest

from initmem_core.report.claims import rate_difference
from initmem_core.report.verdicts import (
    CANNOT_DECIDE,
    CONTRADICTED,
    HORIZON_SHORT,
    NOT_EVALUATED,
    NOT_RESOLVED,
    REPRODUCED,
)
from initmem_core.tracking.records import CellRecord
from initmem_plugins.claims.paper import (
    CLAIMS,
    deep_nets_fail_to_interpolate,
    larger_batch_increases_spread,
    larger_lr_makes_sgd_forget,
    longer_training_keeps_sgd_memory,
    read_sweep,
)
from tests.builders import clocks, record

SIGMAS = (0.1, 2.5)
#: Seed-to-seed wobble (fractions) per seed; it averages to 0 over the first four seeds.
WOBBLE = (0.0, 0.004, -0.004, 0.0, 0.002, -0.002)


def cells(
    config: dict,
    accuracy: tuple[float, float],
    seeds: int = 4,
    clock_sgd: float = 0.001,
    interpolates: tuple[int, int] | None = None,
) -> list[CellRecord]:
    """A group at the two sigmas; ``interpolates``: how many of its seeds reach the threshold at each."""
    out = []
    for index, (sigma, acc) in enumerate(zip(SIGMAS, accuracy)):
        for seed in range(seeds):
            metrics = clocks(clock_sgd, 0.0, 1.0)
            if interpolates is None or seed < interpolates[index]:
                metrics["tau_interp"] = 5.0
            out.append(record({**config, "sigma": sigma, "seed": seed}, acc + WOBBLE[seed], metrics=metrics))
    return out


SHORT = {"opt": "sgd", "lr": 0.01, "batch_size": 32, "epochs": 10}
LONG = {**SHORT, "epochs": 100}


def verdict(claim, records):
    return claim(read_sweep(records))


def test_there_is_a_claim_for_every_finding_of_the_paper():
    assert len(CLAIMS) >= 9
    assert len({claim.__name__ for claim in CLAIMS}) == len(CLAIMS)


def test_training_longer_keeps_memory_when_the_long_spread_stays():
    found = verdict(
        longer_training_keeps_sgd_memory,
        cells(SHORT, (0.95, 0.85), clock_sgd=0.001) + cells(LONG, (0.96, 0.87), clock_sgd=0.01),
    )
    assert found.verdict == REPRODUCED, found.measured
    assert "(10x)" in found.measured and "long − 0.75 × short: +1.50 pp" in found.measured
    assert "long − 0.5 × short: +4.00 pp" in found.measured  # the earlier margin, as a note


def test_training_longer_that_loses_a_third_is_not_called_keeping():
    """The long horizon keeps 67%: the old 50% margin passes, the paper's "does not reduce it" does not."""
    found = verdict(
        longer_training_keeps_sgd_memory,
        cells(SHORT, (0.95, 0.80), clock_sgd=0.001) + cells(LONG, (0.96, 0.86), clock_sgd=0.01),
    )
    assert found.verdict == CONTRADICTED, found.measured
    half = next(q for q in found.notes if q.label.startswith("long − 0.5"))
    assert half.lo > 0  # the old non-inferiority would have said reproduced


def test_training_longer_is_contradicted_when_the_long_run_forgets():
    found = verdict(
        longer_training_keeps_sgd_memory,
        cells(SHORT, (0.95, 0.85), clock_sgd=0.001) + cells(LONG, (0.95, 0.94), clock_sgd=0.01),
    )
    assert found.verdict == CONTRADICTED, found.measured


def test_training_longer_needs_a_horizon_several_times_longer():
    barely = {**SHORT, "epochs": 20}
    found = verdict(
        longer_training_keeps_sgd_memory,
        cells(SHORT, (0.95, 0.85), clock_sgd=0.001) + cells(barely, (0.96, 0.88), clock_sgd=0.002),
    )
    assert found.verdict == NOT_EVALUATED


def test_training_longer_below_three_seeds_cannot_be_decided():
    found = verdict(
        longer_training_keeps_sgd_memory,
        cells(SHORT, (0.95, 0.85), seeds=2, clock_sgd=0.001) + cells(LONG, (0.96, 0.88), seeds=2, clock_sgd=0.01),
    )
    assert found.verdict == CANNOT_DECIDE


def test_a_larger_rate_forgets_when_its_spread_is_smaller():
    fast = {**SHORT, "lr": 0.1}
    records = cells(SHORT, (0.95, 0.85)) + cells(fast, (0.96, 0.95))
    assert verdict(larger_lr_makes_sgd_forget, records).verdict == REPRODUCED
    records = cells(SHORT, (0.95, 0.94)) + cells(fast, (0.96, 0.85), clock_sgd=5.0)
    assert verdict(larger_lr_makes_sgd_forget, records).verdict == CONTRADICTED
    # the same numbers with the larger rate's T_SGD short of its threshold contradict nothing
    short_clock = verdict(larger_lr_makes_sgd_forget, cells(SHORT, (0.95, 0.94)) + cells(fast, (0.96, 0.85)))
    assert short_clock.verdict == HORIZON_SHORT and "T_SGD 0.001 < 3" in short_clock.verdict_text
    slightly = {**SHORT, "lr": 0.02}  # 2x: not "several times larger"
    assert (
        verdict(larger_lr_makes_sgd_forget, cells(SHORT, (0.95, 0.85)) + cells(slightly, (0.96, 0.95))).verdict
        == NOT_EVALUATED
    )


def test_rates_at_different_horizons_are_not_compared():
    fast_longer = {**SHORT, "lr": 0.1, "epochs": 20}
    found = verdict(larger_lr_makes_sgd_forget, cells(SHORT, (0.95, 0.85)) + cells(fast_longer, (0.96, 0.95)))
    assert found.verdict == NOT_EVALUATED


def test_a_larger_batch_is_compared_only_at_the_baselines_rate_and_horizon():
    # Two plain-SGD groups at one batch (a horizon comparison) are no batch comparison...
    records = cells(SHORT, (0.95, 0.85), clock_sgd=0.001) + cells(LONG, (0.96, 0.88), clock_sgd=0.01)
    assert verdict(larger_batch_increases_spread, records).verdict == NOT_EVALUATED
    # ...and a larger batch at another rate is not one either, while one at the same rate is.
    other_rate = {**SHORT, "batch_size": 128, "lr": 0.1}
    assert verdict(larger_batch_increases_spread, records + cells(other_rate, (0.95, 0.70))).verdict == NOT_EVALUATED
    same_rate = {**SHORT, "batch_size": 128}
    assert verdict(larger_batch_increases_spread, records + cells(same_rate, (0.95, 0.70))).verdict == REPRODUCED


DEPTH = {"opt": "sgd", "lr": 0.01, "batch_size": 32, "epochs": 15}


def depth_sweep(deep_interpolates: tuple[int, int], shallow_interpolates=(6, 6), seeds=6):
    return (
        cells({**DEPTH, "arch": "resnet20"}, (0.95, 0.90), seeds, interpolates=shallow_interpolates)
        + cells({**DEPTH, "arch": "resnet56"}, (0.95, 0.80), seeds, interpolates=deep_interpolates)
        + cells({**DEPTH, "arch": "resnet110"}, (0.95, 0.70), seeds, interpolates=deep_interpolates)
    )


def test_deep_nets_failing_at_large_sigma_only_reproduce_the_depth_claim():
    found = verdict(deep_nets_fail_to_interpolate, depth_sweep((6, 0)))
    assert found.verdict == REPRODUCED, found.measured
    assert "resnet56: 6/6 at sigma 0.1, 0/6 at sigma 2.5" in found.measured
    assert "resnet20 − resnet110 at sigma 2.5: +1.00" in found.measured


def test_deep_nets_that_fail_at_every_sigma_do_not_reproduce_it():
    assert verdict(deep_nets_fail_to_interpolate, depth_sweep((0, 0))).verdict == NOT_RESOLVED


def test_deep_nets_that_interpolate_where_the_shallow_one_does_not_contradict_it():
    found = verdict(deep_nets_fail_to_interpolate, depth_sweep((6, 6), shallow_interpolates=(6, 0)))
    assert found.verdict == CONTRADICTED, found.measured


def test_the_depth_claim_counts_runs_of_a_group_that_never_trained():
    # A deep net that never trained at either sigma is left out of the report's groups but not of the count.
    records = depth_sweep((6, 0))
    for cell in records:
        if cell.config.arch == "resnet110":
            cell.metrics["best_val_test_acc"] = 0.1
            cell.metrics.pop("tau_interp", None)
    found = verdict(deep_nets_fail_to_interpolate, records)
    assert "resnet110: 0/6 at sigma 0.1, 0/6 at sigma 2.5" in found.measured


def test_the_depth_claim_with_too_few_seeds_cannot_be_decided():
    assert verdict(deep_nets_fail_to_interpolate, depth_sweep((2, 0), (2, 2), seeds=2)).verdict == CANNOT_DECIDE


def test_depth_reads_only_cifar_resnets_that_differ_in_depth():
    records = cells({**DEPTH, "arch": "resnet20"}, (0.95, 0.9)) + cells({**DEPTH, "arch": "resnet9"}, (0.95, 0.9))
    assert verdict(deep_nets_fail_to_interpolate, records).verdict == NOT_EVALUATED


@pytest.mark.parametrize(
    "k1, n1, k2, n2, low, high",
    [
        # Newcombe (1998), Table II, method 10: 56/70 − 48/80 -> [0.0524, 0.3339]; 9/10 − 3/10 -> [0.1705, 0.8090].
        (56, 70, 48, 80, 0.0524, 0.3339),
        (9, 10, 3, 10, 0.1705, 0.8090),
    ],
)
def test_rate_difference_is_newcombes_hybrid_score_interval(k1, n1, k2, n2, low, high):
    lo, hi = rate_difference(k1, n1, k2, n2)
    assert lo == pytest.approx(low, abs=5e-4) and hi == pytest.approx(high, abs=5e-4)


def test_rate_difference_is_defined_at_the_edges_and_empty_without_runs():
    lo, hi = rate_difference(6, 6, 0, 6)
    assert 0 < lo < 1 and hi == pytest.approx(1.0)
    assert all(math.isnan(x) for x in rate_difference(0, 0, 3, 6))


def horizon_cells(config: dict, accuracy: tuple[float, float], last_epoch: int) -> list[CellRecord]:
    """``cells`` whose per-epoch history ends at ``last_epoch``: the epochs they trained."""
    out = cells(config, accuracy)
    for one in out:
        one.histories = {"test_acc": [(0, 0.1), (last_epoch, one.metrics["best_val_test_acc"])]}
    return out


@pytest.mark.parametrize(("plain_epochs", "compared"), [(74, True), (50, False)])
def test_a_group_trained_to_a_clock_is_compared_by_the_epochs_the_clock_set(plain_epochs, compared):
    # paper-l2-horizon: L2 trained --until clock_l2=0.25 (capped at 200 epochs, reached at 74),
    # the plain group given 74 epochs: the same horizon, so they differ only in L2.
    from initmem_plugins.claims.paper import l2_shrinks_sgd_spread

    plain = horizon_cells({**SHORT, "epochs": plain_epochs}, (0.97, 0.91), plain_epochs)
    l2 = horizon_cells({**SHORT, "l2": 0.01, "until": "clock_l2=0.25", "epochs": 200}, (0.96, 0.95), 74)
    found = verdict(l2_shrinks_sgd_spread, plain + l2)
    assert (found.verdict != NOT_EVALUATED) is compared
    if compared:
        assert found.verdict == REPRODUCED
