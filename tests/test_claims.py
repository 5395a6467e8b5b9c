"""The paper-findings check on hand-made sweep results: one world where every claim holds, one where
each fails; claims compare like with like (strata); an optimizer's family comes from its plugin."""

from __future__ import annotations

import numpy as np
import pytest

from initmem_core import hookimpl
from initmem_core.plugin_system.loader import load_registry, set_registry
from initmem_core.report.claim_groups import forgetting_clock, optimizer_family, read_sweep
from initmem_core.report.inference import POPULATION
from initmem_core.report.verdicts import CANNOT_DECIDE, CONTRADICTED, NOT_EVALUATED, NOT_RESOLVED, REPRODUCED
from initmem_core.tracking.records import CellRecord
from initmem_core.vocabulary import ADAPTIVE_FAMILY, SGD_FAMILY
from initmem_plugins.claims.paper import (
    CLAIMS,
    CLAIMS_BY_NAME,
    adaptive_optimizers_forget,
    evaluate_findings,
    longer_training_keeps_sgd_memory,
    sgd_remembers_more_than_adaptive,
)
from tests.builders import REMEMBERING_WORLD, records

ALL_HOLD = (
    "sgd_remembers_more_than_adaptive",
    "adaptive_optimizers_forget",
    "l2_shrinks_sgd_spread",
    "l2_brings_spread_near_zero",
    "larger_batch_increases_spread",
    "norms_coupled_for_sgd_not_adaptive",
    "spread_orders_by_clock_within_family",
    "sgd_keeps_memory",
)


def by_name(found):
    return {f.name: f for f in found}


def test_every_claim_holds_where_the_numbers_say_so():
    found = by_name(evaluate_findings(records(REMEMBERING_WORLD)))
    assert list(found) == [claim.__name__ for claim in CLAIMS] == list(CLAIMS_BY_NAME)
    assert all(found[name].verdict == REPRODUCED for name in ALL_HOLD), [(f.name, f.measured) for f in found.values()]
    # Forgetting follows the clocks reads per-epoch histories these records lack (tests/test_forgetting.py);
    # horizon, rate and depth have no groups here (tests/test_claims_horizon_rate_depth.py).
    assert found["forgetting_follows_the_clocks"].measured == "no per-epoch histories in these records"
    rest = [f for name, f in found.items() if name not in ALL_HOLD]
    assert {f.verdict for f in rest} == {NOT_EVALUATED}
    assert all(f.needs for f in rest)  # each says what it would need
    first = found["sgd_remembers_more_than_adaptive"]
    assert "sgd b=32 30.00 pp" in first.measured and "adam 2.00 pp" in first.measured
    assert first.key is not None and first.key.lo == min(q.lo for q in first.quantities)  # least clear of zero
    assert "25%" in found["adaptive_optimizers_forget"].margin


def test_every_claim_fails_in_a_world_that_forgets():
    forgetting = {
        # SGD forgets (tiny spread, norms converge), adaptive methods remember, L2 and batch do the opposite
        # (every mechanism's clock past its threshold, so a contradiction is one: report/regime.py)
        "sgd": ({"opt": "sgd", "batch_size": 32}, (0.90, 0.89), (10.0, 11.0), (5.0, 0.0, 5.0)),
        "sgd-big-batch": ({"opt": "sgd", "batch_size": 128}, (0.90, 0.90), (10.0, 11.0), (0.002, 0.0, 1.2)),
        "sgd-l2": ({"opt": "sgd", "batch_size": 32, "l2": 0.01}, (0.90, 0.70), (3.0, 40.0), (0.01, 5.0, 5.0)),
        "adam": ({"opt": "adam", "batch_size": 32, "lr": 0.001}, (0.91, 0.60), (1.0, 30.0), (0.0001, 0.0, 50.0)),
        "muon": ({"opt": "muon", "batch_size": 32, "lr": 0.02}, (0.92, 0.50), (1.0, 25.0), (0.01, 0.0, 100.0)),
    }
    found = by_name(evaluate_findings(records(forgetting)))
    # two SGD batches only; and SGD's 1 pp is still a spread above zero (a spread is never below it)
    holds = [name for name in ALL_HOLD if name not in ("spread_orders_by_clock_within_family", "sgd_keeps_memory")]
    assert [found[name].reproduced for name in holds] == [False] * len(holds), [
        (f.name, f.measured) for f in found.values()
    ]


def test_claims_without_their_groups_are_not_evaluated():
    only_sgd = {"sgd": REMEMBERING_WORLD["sgd"]}
    found = by_name(evaluate_findings(records(only_sgd)))
    assert found.pop("sgd_keeps_memory").verdict == REPRODUCED  # the headline needs SGD alone
    assert [f.reproduced for f in found.values()] == [None] * (len(CLAIMS) - 1)
    assert all(f.measured == "groups missing from the sweep" for f in found.values())


def test_forgetting_clock_is_t_adapt_for_adaptive_and_t_sgd_plus_t_l2_for_sgd():
    assert forgetting_clock(ADAPTIVE_FAMILY, 1.0, 2.0, 30.0) == 30.0
    assert forgetting_clock(SGD_FAMILY, 1.0, 2.0, 30.0) == 3.0


def test_with_too_few_seeds_every_claim_says_it_cannot_be_decided():
    found = by_name(evaluate_findings(records(REMEMBERING_WORLD, seeds=2)))
    assert {found[name].verdict for name in ALL_HOLD} == {CANNOT_DECIDE}, [(f.name, f.measured) for f in found.values()]
    assert all(f.reproduced is None for f in found.values())
    assert "too few seeds to decide (2 < 3)" in found["sgd_remembers_more_than_adaptive"].measured


# -- like with like ------------------------------------------------------------------------------

SGD_FOUR, ADAM_FOUR = ({"opt": "sgd"}, (0.90, 0.82)), ({"opt": "adam", "lr": 0.001}, (0.90, 0.82))
FLAT_SGD, FLAT_ADAM = ({"opt": "sgd"}, (0.86, 0.86)), ({"opt": "adam", "lr": 0.001}, (0.86, 0.86))


def world(**groups):
    return {name: (config, accs, (1.0, 25.0), (0.01, 0.0, 5.0)) for name, (config, accs) in groups.items()}


def test_two_architectures_identical_within_each_are_not_decided():
    """SGD and Adam alike within each architecture (ResNet-20: both 8 pp; ResNet-56: both flat): the
    claim compares ResNet-20 SGD with ResNet-20 Adam only, never ResNet-56 SGD with ResNet-20 Adam."""
    cells = records(world(sgd=SGD_FOUR, adam=ADAM_FOUR), seeds=6, arch="resnet20") + records(
        world(sgd=FLAT_SGD, adam=FLAT_ADAM), seeds=6, arch="resnet56"
    )
    found = sgd_remembers_more_than_adaptive(read_sweep(cells))
    assert found.verdict == NOT_RESOLVED, found.measured
    assert [part.stratum for part in found.parts] == ["arch=resnet20", "arch=resnet56"]
    assert [part.verdict for part in found.parts] == [NOT_RESOLVED, NOT_RESOLVED]
    assert all(abs(q.estimate) < 0.5 for q in found.quantities)  # within an architecture: no difference


def test_three_architectures_each_decide_in_their_own_stratum():
    cells = (
        records(world(sgd=SGD_FOUR, adam=FLAT_ADAM), seeds=6, arch="resnet20")
        + records(world(sgd=SGD_FOUR, adam=FLAT_ADAM), seeds=6, arch="resnet32")
        + records(world(sgd=FLAT_SGD, adam=ADAM_FOUR), seeds=6, arch="resnet56")
    )
    found = sgd_remembers_more_than_adaptive(read_sweep(cells))
    assert [part.verdict for part in found.parts] == [REPRODUCED, REPRODUCED, CONTRADICTED]
    assert found.verdict == CONTRADICTED  # reproduced only where every stratum reproduces it


def test_a_sweep_over_two_datasets_never_mixes_them():
    cells = records(world(sgd=SGD_FOUR), seeds=4, data="digits") + records(world(adam=FLAT_ADAM), seeds=4, data="mnist")
    assert sgd_remembers_more_than_adaptive(read_sweep(cells)).verdict == NOT_EVALUATED


def test_adaptive_forget_is_not_reproduced_where_adam_keeps_half_of_sgds_spread():
    """Adam 4 pp beside SGD's 8: the ordering holds, but Adam did not forget."""
    half = ({"opt": "adam", "lr": 0.001}, (0.90, 0.86))
    sweep = read_sweep(records(world(sgd=SGD_FOUR, adam=half), seeds=6))
    assert sgd_remembers_more_than_adaptive(sweep).verdict == REPRODUCED
    forgets = adaptive_optimizers_forget(sweep)
    assert forgets.verdict == CONTRADICTED, forgets.measured
    flat = read_sweep(records(world(sgd=SGD_FOUR, adam=FLAT_ADAM), seeds=6))
    assert adaptive_optimizers_forget(flat).verdict == REPRODUCED


# -- families from the plugins -------------------------------------------------------------------


class SignPlugin:
    """A third-party optimizer declaring the 'lr' clock: adaptive, whatever its name."""

    @staticmethod
    @hookimpl
    def initmem_register_optimizers(register):
        register("sign-step", "torch.optim:SGD", "a sign-of-gradient step (test)", defaults={"lr": 1e-3}, clock="lr")
        register("slow-ball", "torch.optim:SGD", "an SGD-like one (test)", defaults={"lr": 1e-2}, clock="heavy-ball")


@pytest.fixture
def third_party_registry():
    previous = set_registry(load_registry(entry_points=False, extra_plugins=[("sign-test", SignPlugin)]))
    yield
    set_registry(previous)


def test_a_third_party_optimizer_is_classed_by_its_declared_clock(third_party_registry):
    assert optimizer_family(CellRecord({"opt": "sign-step"})) == ADAPTIVE_FAMILY
    assert optimizer_family(CellRecord({"opt": "slow-ball"})) == SGD_FAMILY
    sign = ({"opt": "sign-step", "lr": 0.001}, (0.86, 0.86))
    found = sgd_remembers_more_than_adaptive(read_sweep(records(world(sgd=SGD_FOUR, sign=sign), seeds=6)))
    assert found.verdict == REPRODUCED and "sign-step" in found.measured


def test_the_logged_convention_wins_over_the_installed_plugin():
    """A run's logged clock convention classes it even where its plugin is not installed."""
    assert optimizer_family(CellRecord({"opt": "not-installed-here"}, clock_convention="lr")) == ADAPTIVE_FAMILY
    assert optimizer_family(CellRecord({"opt": "adam"}, clock_convention="heavy-ball")) == SGD_FAMILY


@pytest.mark.slow  # imports timm
def test_timm_optimizers_are_classed_by_timm_class():
    assert optimizer_family(CellRecord({"opt": "timm:lion"})) == ADAPTIVE_FAMILY
    assert optimizer_family(CellRecord({"opt": "timm:sgd"})) == SGD_FAMILY


# -- population intervals everywhere -------------------------------------------------------------


def with_records(cells: list[CellRecord], n_test: int = 400) -> list[CellRecord]:
    """Each cell with a per-example record matching its accuracy (one test set, examples in order
    of difficulty, so runs of one accuracy get the same examples right)."""
    for cell in cells:
        right = int(round(cell.metrics["best_val_test_acc"] * n_test))
        cell.test_correct = np.arange(n_test) < right
        cell.metrics["best_val_test_acc"] = right / n_test
    return cells


def test_every_interval_is_for_the_population_when_records_are_present():
    long = {"sgd-long": ({"opt": "sgd", "batch_size": 32, "epochs": 100}, (0.90, 0.62), (1.0, 25.0), (0.05, 0.0, 25))}
    cells = with_records(records({**REMEMBERING_WORLD, **long}))
    found = evaluate_findings(cells)
    pp = [q for f in found for q in f.quantities + f.notes if q.unit == "pp"]
    assert pp and {q.interval_for for q in pp} == {POPULATION}
    longer = longer_training_keeps_sgd_memory(read_sweep(cells))
    assert longer.verdict != NOT_EVALUATED
    assert [q.interval_for for q in longer.quantities + longer.notes] == [POPULATION] * 4


def test_the_effective_step_claim_compares_plain_and_matched_sgd_only():
    matched_flat = ({"opt": "sgd", "lr_match_sigma": 1.0}, (0.86, 0.86))
    matched_same = ({"opt": "sgd", "lr_match_sigma": 1.0}, (0.90, 0.82))
    claim = CLAIMS_BY_NAME["effective_step_explains_memory"]
    assert claim(read_sweep(records(world(sgd=SGD_FOUR, matched=matched_flat), seeds=6))).verdict == REPRODUCED
    kept = claim(read_sweep(records(world(sgd=SGD_FOUR, matched=matched_same), seeds=6)))
    assert kept.verdict == CONTRADICTED and "matched to sigma 1" in kept.measured
    # the matched group is in no other claim's stratum: it is not a second baseline
    assert sgd_remembers_more_than_adaptive(
        read_sweep(records(world(matched=matched_flat, adam=FLAT_ADAM)))
    ).verdict == (NOT_EVALUATED)


def test_a_one_seed_sweep_cannot_be_decided():
    found = sgd_remembers_more_than_adaptive(read_sweep(records(world(sgd=SGD_FOUR, adam=FLAT_ADAM), seeds=1)))
    assert found.verdict == CANNOT_DECIDE, found.measured
