"""The paper-findings check on hand-made sweep results: one world where every claim holds, one where each fails."""

from __future__ import annotations

from initmem_core.report.findings import CANNOT_DECIDE, NOT_EVALUATED, evaluate_findings, forgetting_clock
from tests.builders import clocks, record

SIGMAS = (0.1, 2.5)
# group -> (fixed config, test accuracy at each sigma, final ||W|| at each sigma, clocks)
REMEMBERING_WORLD = {
    "sgd": ({"opt": "sgd", "batch_size": 32}, (0.90, 0.60), (1.0, 25.0), (0.01, 0.0, 5.0)),
    "sgd-big-batch": ({"opt": "sgd", "batch_size": 128}, (0.90, 0.50), (1.0, 25.0), (0.002, 0.0, 1.2)),
    "sgd-l2": ({"opt": "sgd", "batch_size": 32, "l2": 0.01}, (0.90, 0.88), (3.0, 4.0), (0.01, 0.05, 5.0)),
    "adam": ({"opt": "adam", "batch_size": 32, "lr": 0.001}, (0.91, 0.89), (30.0, 33.0), (0.0001, 0.0, 50.0)),
    "muon": ({"opt": "muon", "batch_size": 32, "lr": 0.02}, (0.92, 0.90), (20.0, 21.0), (0.01, 0.0, 100.0)),
}


#: Seed-to-seed wobble of accuracy (fractions) at each sigma; each column averages to 0.0005.
WOBBLE = {0.1: (0.0, 0.004, -0.004, 0.002), 2.5: (0.002, -0.004, 0.004, 0.0)}


def records(world, seeds=4):
    out = []
    for config, accs, norms, (t_sgd, t_l2, t_adapt) in world.values():
        for sigma, acc, norm in zip(SIGMAS, accs, norms):
            for seed in range(seeds):
                acc_seed = acc + WOBBLE[sigma][seed]
                out.append(
                    record(
                        {**config, "sigma": sigma, "seed": seed},
                        acc_seed,
                        metrics={
                            "final_test_acc": acc_seed,
                            "tau_interp": 5,
                            "repair_gap": 0.0,
                            "weight_norm": norm,
                            "weight_norm_ratio": norm / sigma,
                            **clocks(t_sgd, t_l2, t_adapt),
                        },
                    )
                )
    return out


def verdicts(world):
    return {f.claim: f.reproduced for f in evaluate_findings(records(world))}


def test_every_claim_holds_where_the_numbers_say_so():
    found = evaluate_findings(records(REMEMBERING_WORLD))
    assert len(found) == 9
    # The sixth, forgetting follows the clocks, reads per-epoch histories these records lack
    # (tests/test_forgetting.py decides it on synthetic histories); the last three (horizon, rate, depth)
    # have no groups here (tests/test_findings_new_claims.py).
    assert all(f.reproduced is True for f in found[:5]), [(f.claim, f.measured) for f in found]
    assert found[5].verdict == NOT_EVALUATED and found[5].measured == "no per-epoch histories in these records"
    assert [f.verdict for f in found[6:]] == [NOT_EVALUATED] * 3
    first = found[0]
    assert "sgd b=32 30.00 pp" in first.measured and "adam 2.00 pp" in first.measured


def test_every_claim_fails_in_a_world_that_forgets():
    forgetting = {
        # SGD forgets (tiny spread, norms converge), adaptive methods remember, L2 and batch do the opposite
        "sgd": ({"opt": "sgd", "batch_size": 32}, (0.90, 0.89), (10.0, 11.0), (0.01, 0.0, 5.0)),
        "sgd-big-batch": ({"opt": "sgd", "batch_size": 128}, (0.90, 0.90), (10.0, 11.0), (0.002, 0.0, 1.2)),
        "sgd-l2": ({"opt": "sgd", "batch_size": 32, "l2": 0.01}, (0.90, 0.70), (3.0, 40.0), (0.01, 0.05, 5.0)),
        "adam": ({"opt": "adam", "batch_size": 32, "lr": 0.001}, (0.91, 0.60), (1.0, 30.0), (0.0001, 0.0, 50.0)),
        "muon": ({"opt": "muon", "batch_size": 32, "lr": 0.02}, (0.92, 0.50), (1.0, 25.0), (0.01, 0.0, 100.0)),
    }
    found = evaluate_findings(records(forgetting))
    assert [f.reproduced for f in found] == [False] * 5 + [None] * 4, [(f.claim, f.measured) for f in found]


def test_claims_without_their_groups_are_not_evaluated():
    only_sgd = {"sgd": REMEMBERING_WORLD["sgd"]}
    found = evaluate_findings(records(only_sgd))
    assert [f.reproduced for f in found] == [None] * 9
    assert all(f.measured == "groups missing from the sweep" for f in found)


def test_forgetting_clock_is_t_adapt_for_adaptive_and_t_sgd_plus_t_l2_for_sgd():
    assert forgetting_clock("adamw", 1.0, 2.0, 30.0) == 30.0
    assert forgetting_clock("sgd", 1.0, 2.0, 30.0) == 3.0


def test_with_too_few_seeds_every_claim_says_it_cannot_be_decided():
    found = evaluate_findings(records(REMEMBERING_WORLD, seeds=2))
    assert [f.verdict for f in found] == [CANNOT_DECIDE] * 5 + [NOT_EVALUATED] * 4, [
        (f.claim, f.measured) for f in found
    ]
    assert all(f.reproduced is None for f in found)
    assert "too few seeds to decide (2 < 3)" in found[0].measured
