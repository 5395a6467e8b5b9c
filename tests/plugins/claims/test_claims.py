"""The paper's claims (initmem_plugins/claims/paper.py, on initmem_core.report.claim_api)
on hand-made sweep results: one world where every claim holds, one where each fails; claims compare
like with like (strata); an optimizer's family comes from its plugin; the claims on training longer, a
larger rate and depth each read only the groups that differ in the one setting they are about; a
difference inside seed noise is not resolved."""

from __future__ import annotations

import math

import numpy as np
import pytest

from initmem_core import hookimpl
from initmem_core.config import RunConfig
from initmem_core.plugin_system.loader import load_registry, set_registry
from initmem_core.report.claim_groups import UNKNOWN_FAMILY, forgetting_clock, optimizer_family, read_sweep
from initmem_core.report.inference import POPULATION
from initmem_core.report.verdicts import (
    CANNOT_DECIDE,
    CONTRADICTED,
    HORIZON_SHORT,
    NOT_EVALUATED,
    NOT_RESOLVED,
    REPRODUCED,
)
from initmem_core.tracking.records import CellRecord
from initmem_core.vocabulary import ADAPTIVE_FAMILY, SGD_FAMILY
from initmem_plugins.claims.baseline import baseline_sgd
from initmem_plugins.claims.declared import STATEMENTS
from initmem_plugins.claims.paper import norm_forgetting, rate_difference
from tests.support.builders import REMEMBERING_WORLD, SIGMAS, claim, clocks, record, records
from tests.support.builders import findings as evaluate_findings

adaptive_optimizers_forget = claim("adaptive_optimizers_forget")
deep_nets_fail_to_interpolate = claim("deep_nets_fail_to_interpolate")
larger_batch_increases_spread = claim("larger_batch_increases_spread")
larger_lr_makes_sgd_forget = claim("larger_lr_makes_sgd_forget")
longer_training_keeps_sgd_memory = claim("longer_training_keeps_sgd_memory")
norms_coupled_for_sgd_not_adaptive = claim("norms_coupled_for_sgd_not_adaptive")
sgd_remembers_more_than_adaptive = claim("sgd_remembers_more_than_adaptive")
spread_orders_by_clock_within_family = claim("spread_orders_by_clock_within_family")

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
    assert list(found) == list(STATEMENTS)  # every claim the plugin declares, in its order
    assert all(found[name].verdict == REPRODUCED for name in ALL_HOLD), [(f.name, f.measured) for f in found.values()]
    # Forgetting follows the clocks reads per-epoch histories these records lack (tests/core/report/test_forgetting.py);
    # horizon, rate and depth have no groups here (below).
    assert found["forgetting_follows_the_clocks"].measured == "no per-epoch histories in these records"
    rest = [f for name, f in found.items() if name not in ALL_HOLD]
    assert {f.verdict for f in rest} == {NOT_EVALUATED}
    assert all(f.needs for f in rest)  # each says what it would need
    first = found["sgd_remembers_more_than_adaptive"]
    assert "sgd b=32 30.00 pp" in first.measured and "adam lr=0.001 b=32 2.00 pp" in first.measured
    assert first.key is not None and first.key.lo == min(q.lo for q in first.quantities)  # least clear of zero
    assert "25%" in found["adaptive_optimizers_forget"].margin


def test_every_claim_fails_in_a_world_that_forgets():
    forgetting = {
        # low-rate SGD forgets (tiny spread, norms converge), adaptive methods remember, L2 and batch do
        # the opposite (every mechanism's clock past its threshold, so a contradiction is one: report/regime.py)
        "sgd": ({"opt": "sgd", "batch_size": 32}, (0.90, 0.89), (10.0, 11.0), (0.01, 0.0, 5.0)),
        "sgd-big-batch": ({"opt": "sgd", "batch_size": 128}, (0.90, 0.90), (10.0, 11.0), (0.002, 0.0, 1.2)),
        "sgd-l2": ({"opt": "sgd", "batch_size": 32, "l2": 0.01}, (0.90, 0.70), (3.0, 40.0), (0.01, 5.0, 5.0)),
        "adam": ({"opt": "adam", "batch_size": 32, "lr": 0.001}, (0.91, 0.60), (1.0, 30.0), (0.0001, 0.0, 50.0)),
        "muon": ({"opt": "muon", "batch_size": 32, "lr": 0.02}, (0.92, 0.50), (1.0, 25.0), (0.01, 0.0, 100.0)),
    }
    found = by_name(evaluate_findings(records(forgetting)))
    # two SGD batches only; and SGD's 1 pp is still a spread above zero (a spread is never below it);
    # low-rate SGD's batch noise never ran its clock (T_SGD 0.01 < 3): the batch claim cannot be contradicted
    left = ("spread_orders_by_clock_within_family", "sgd_keeps_memory", "larger_batch_increases_spread")
    holds = [name for name in ALL_HOLD if name not in left]
    assert [found[name].reproduced for name in holds] == [False] * len(holds), [
        (f.name, f.measured) for f in found.values()
    ]
    assert found["larger_batch_increases_spread"].verdict == HORIZON_SHORT


def test_claims_without_their_groups_are_not_evaluated():
    only_sgd = {"sgd": REMEMBERING_WORLD["sgd"]}
    found = by_name(evaluate_findings(records(only_sgd)))
    assert found.pop("sgd_keeps_memory").verdict == REPRODUCED  # the headline needs SGD alone
    assert [f.reproduced for f in found.values()] == [None] * (len(STATEMENTS) - 1)
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
        register("mystery", "torch.optim:SGD", "declares no clock (test)", defaults={"lr": 1e-2})


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


def test_an_optimizer_that_declares_no_clock_is_in_no_family_and_the_family_claims_say_so(third_party_registry):
    from initmem_core.plugin_system.loader import get_registry
    from initmem_core.training.plan import plan_run

    forgetting_follows_the_clocks = claim("forgetting_follows_the_clocks")
    assert optimizer_family(CellRecord({"opt": "mystery"})) == UNKNOWN_FAMILY
    # its run counts its clocks as heavy-ball's but logs that nothing was declared: no family from the record either
    convention = plan_run(RunConfig(opt="mystery"), get_registry(), "sqlite:///unused.db").params["clock_convention"]
    assert convention.startswith("undeclared: counted as heavy-ball")
    logged = convention.partition(":")[0]
    assert optimizer_family(CellRecord({"opt": "mystery"}, clock_convention=logged)) == UNKNOWN_FAMILY
    mystery = ({"opt": "mystery", "lr": 0.01, "batch_size": 64}, (0.86, 0.80))
    sweep = read_sweep(records(world(sgd=SGD_FOUR, mystery=mystery), seeds=6))
    found = sgd_remembers_more_than_adaptive(sweep)
    assert "mystery" not in found.measured  # neither a baseline nor an adaptive group
    for other in (spread_orders_by_clock_within_family, forgetting_follows_the_clocks):
        assert "left out: mystery lr=0.01 b=64 (its optimizer's plugin declares no clock" in other(sweep).measured


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
    effective = claim("effective_step_explains_memory")
    assert effective(read_sweep(records(world(sgd=SGD_FOUR, matched=matched_flat), seeds=6))).verdict == REPRODUCED
    kept = effective(read_sweep(records(world(sgd=SGD_FOUR, matched=matched_same), seeds=6)))
    assert kept.verdict == CONTRADICTED and "matched to sigma 1" in kept.measured
    # the matched group is in no other claim's stratum: it is not a second baseline
    assert sgd_remembers_more_than_adaptive(
        read_sweep(records(world(matched=matched_flat, adam=FLAT_ADAM)))
    ).verdict == (NOT_EVALUATED)


def test_a_one_seed_sweep_cannot_be_decided():
    found = sgd_remembers_more_than_adaptive(read_sweep(records(world(sgd=SGD_FOUR, adam=FLAT_ADAM), seeds=1)))
    assert found.verdict == CANNOT_DECIDE, found.measured


# Training longer, a larger rate and batch, depth.

#: Seed-to-seed wobble (fractions) per seed; it averages to 0 over the first four seeds.
SEED_WOBBLE = (0.0, 0.004, -0.004, 0.0, 0.002, -0.002)


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
            out.append(record({**config, "sigma": sigma, "seed": seed}, acc + SEED_WOBBLE[seed], metrics=metrics))
    return out


SHORT = {"opt": "sgd", "lr": 0.01, "batch_size": 32, "epochs": 10}
LONG = {**SHORT, "epochs": 100}


def verdict(evaluate, records):
    return evaluate(read_sweep(records))


def test_there_is_a_claim_for_every_finding_of_the_paper():
    from initmem_core.report.claims import claim_specs

    names = [spec.name for spec in claim_specs() if spec.provider.plugin == "claims"]
    assert len(names) >= 9 and names == list(STATEMENTS)


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
    l2_shrinks_sgd_spread = claim("l2_shrinks_sgd_spread")
    plain = horizon_cells({**SHORT, "epochs": plain_epochs}, (0.97, 0.91), plain_epochs)
    l2 = horizon_cells({**SHORT, "l2": 0.01, "until": "clock_l2=0.25", "epochs": 200}, (0.96, 0.95), 74)
    found = verdict(l2_shrinks_sgd_spread, plain + l2)
    assert (found.verdict != NOT_EVALUATED) is compared
    if compared:
        assert found.verdict == REPRODUCED


# Differences against seed noise, norms and rank correlations.


def opt_cells(opt, accs_by_seed, norms=(1.0, 25.0), sigmas=(0.1, 2.5), **config):
    out = []
    for seed, accs in enumerate(accs_by_seed):
        for sigma, acc, norm in zip(sigmas, accs, norms):
            out.append(
                record(
                    {"opt": opt, "sigma": sigma, "seed": seed, **config},
                    acc,
                    metrics={
                        "weight_norm": norm,
                        "weight_norm_ratio": norm / sigma,
                        **clocks(0.01, 0.0, 1.0 if opt == "sgd" else 50.0),
                    },
                )
            )
    return out


def test_a_difference_inside_seed_noise_is_not_resolved():
    # SGD's mean spread (10 pp) is above Adam's (2 pp) but the seeds disagree on the order.
    records = opt_cells("sgd", [(0.90, 0.70), (0.90, 0.90), (0.90, 0.74), (0.90, 0.86)]) + opt_cells(
        "adam", [(0.90, 0.86), (0.90, 0.90), (0.90, 0.88), (0.90, 0.88)], lr=1e-3
    )
    first = evaluate_findings(records)[0]
    assert first.verdict == NOT_RESOLVED and first.reproduced is None
    assert "sgd b=64 10.00 pp (debiased +10.00" in first.measured and "adam lr=0.001 b=64 2.00 pp" in first.measured


def test_norm_claim_fails_when_adams_norm_ratio_stays_at_its_initial_value():
    # Adam barely moves its weights: ||W||/||W0|| ~ 1.005 at both sigmas, so the final ratio across
    # sigma is the initial one, exactly what the old "final ratio smaller than SGD's" check passed.
    sgd = opt_cells("sgd", [(0.9, 0.6), (0.9, 0.62), (0.9, 0.61)], norms=(2.0, 26.0))
    adam = opt_cells("adam", [(0.9, 0.88), (0.9, 0.89), (0.9, 0.88)], norms=(0.1005, 2.5125), lr=1e-3)
    sweep = read_sweep(sgd + adam)
    base = baseline_sgd(sweep, sweep.groups)
    moved = norm_forgetting(next(g for g in sweep.groups if g.config.opt == "adam"))
    assert moved == pytest.approx({0: 0.0, 1: 0.0, 2: 0.0}, abs=1e-9)  # log(25)/log(25)
    expected_sgd = 1 - math.log(13) / math.log(25)
    assert base is not None and norm_forgetting(base) == pytest.approx(dict.fromkeys(range(3), expected_sgd))
    finding = norms_coupled_for_sgd_not_adaptive(sweep)
    assert finding.verdict == CONTRADICTED  # Adam's norms did not converge at all
    assert [q.verdict for q in finding.quantities] == [REPRODUCED, CONTRADICTED]  # one line per optimizer
    assert "(contradicted)" in finding.measured


def test_spearman_within_a_family_handles_tied_spreads():
    from scipy import stats

    records = (
        opt_cells("sgd", [(0.9, 0.6)] * 3, batch_size=8)
        + opt_cells("sgd", [(0.9, 0.6)] * 3, batch_size=32)
        + opt_cells("sgd", [(0.9, 0.88)] * 3, batch_size=128)
    )
    for cell in records:  # T_SGD falls with the batch
        cell.metrics["clock_sgd"] = 0.32 / cell.config.batch_size
    finding = spread_orders_by_clock_within_family(read_sweep(records))
    # clocks 0.04, 0.01, 0.0025; spreads 30, 30, 2: average ranks; here the larger clock has the larger spread
    rho = stats.spearmanr([0.04, 0.01, 0.0025], [30.0, 30.0, 2.0]).statistic
    assert f"{-rho:+.2f}" in finding.measured and rho == pytest.approx(0.866, abs=1e-3)
    assert finding.quantities[0].estimate == pytest.approx(-rho)
