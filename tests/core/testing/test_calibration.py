"""The report's error rates, checked by simulation with a known truth (docs/STATISTICS.md has the
tables). Seeded, so each rate is a fixed number: a change to the method that makes it drift past its
bound fails here.

The first checks draw accuracy tables straight into ``report.inference``; the others draw whole
sweeps on a shared test set (``initmem_core.testing.calibration``) and read them as a real sweep is
read, the paper's claims in the worlds ``benchmarks/calibration.py`` measures them in.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from initmem_core.report.claim_groups import read_sweep
from initmem_core.report.claims import claim_named, evaluate_claim
from initmem_core.report.inference import cross_fit_spread, spread_difference
from initmem_core.testing.calibration import DIGITS_FITTED, HORIZON, calibrate_claim, shared_test_sweep
from initmem_plugins.claims.calibration import ADAM, SGD, WORLDS, on

SIGMAS = (0.1, 0.5, 1.4, 2.5)
FOUR_PP, FIVE_PP, FLAT = (97, 96, 95, 93), (97, 95, 94, 92), (95, 95, 95, 95)
SWEEPS = 150


def table(rng, truth, seeds, run_sd=0.0, fail=0.0, n_test=360):
    """Accuracy (pp) by sigma and seed: n_test examples flipped at the run's accuracy, the run
    shifted by run_sd pp; each cell fails with probability ``fail``."""
    out = {}
    for sigma, accuracy in zip(SIGMAS, truth):
        p = np.clip((accuracy + rng.normal(0, run_sd, seeds)) / 100, 0, 1)
        runs = 100 * rng.binomial(n_test, p) / n_test
        out[sigma] = {seed: float(v) for seed, v in enumerate(runs) if rng.random() >= fail}
    return out


@pytest.mark.slow  # simulates hundreds of sweeps through the report
@pytest.mark.parametrize("seeds, run_sd", [(4, 0.0), (4, 2.5), (6, 2.5)])
def test_identical_groups_get_a_verdict_in_about_5_percent_of_sweeps(seeds, run_sd):
    rng = np.random.default_rng(seeds * 10 + int(run_sd))
    verdicts = 0
    for _ in range(SWEEPS):
        d = spread_difference(table(rng, FOUR_PP, seeds, run_sd), table(rng, FOUR_PP, seeds, run_sd))
        verdicts += d.lo > 0 or d.hi < 0
    assert verdicts / SWEEPS <= 0.08  # 5% nominal; 150 sweeps have a standard error of 1.8 points


@pytest.mark.slow  # simulates hundreds of sweeps through the report
@pytest.mark.parametrize("run_sd", [0.0, 2.5])
def test_a_flat_groups_interval_holds_zero(run_sd):
    rng = np.random.default_rng(1 + int(run_sd))
    estimates = [cross_fit_spread(table(rng, FLAT, 6, run_sd)) for _ in range(SWEEPS)]
    held = np.mean([e.lo <= 0 <= e.hi for e in estimates])
    assert held >= 0.88
    assert abs(np.mean([e.estimate for e in estimates])) < 0.3  # centred on the truth, 0


@pytest.mark.slow  # simulates hundreds of sweeps through the report
def test_a_5pp_spread_with_failed_cells_is_covered():
    rng = np.random.default_rng(2)
    held = decided = 0
    for _ in range(SWEEPS):
        e = cross_fit_spread(table(rng, FIVE_PP, 6, run_sd=1.0, fail=0.1))
        if e.decided:
            decided += 1
            held += e.lo <= 5.0 <= e.hi
    assert decided >= 0.9 * SWEEPS and held / decided >= 0.9


@pytest.mark.slow  # simulates hundreds of sweeps through the report
def test_the_debiased_spread_has_the_power_the_noise_allows():
    rng = np.random.default_rng(3)
    found = np.mean(
        [spread_difference(table(rng, FOUR_PP, 6), table(rng, (97, 96.5, 96, 95), 6)).lo > 0 for _ in range(SWEEPS)]
    )
    # 49.2% over 27,000 sweeps (docs/STATISTICS.md); these 150 seeded sweeps find 51.3%, where the
    # first revision of the rule (one seed held out at every sigma, 400 plain draws) found 46.7%
    assert found >= 0.48


@pytest.mark.slow(seconds=30)  # 16 sweeps of each world, per claim, through the report
@pytest.mark.parametrize("world", WORLDS, ids=lambda world: world.claim)
def test_each_paper_claim_is_rarely_reproduced_where_false_and_often_where_true(world):
    c = calibrate_claim(world.claim, seeds=6, sweeps=16, **world.arguments())
    assert c.false_verdict_rate <= 2 / 16 and c.wrong_way_rate <= 1 / 16, c
    assert c.power >= world.least_power, c  # 40-100% over 200 sweeps (docs/STATISTICS.md): far from none


# -- The regime a verdict needs (report/regime.py), on the noise fitted to the exports. Each test
# asserts the bound against the simulated rate and checks, on the same sweeps, that the rate would
# break it with the regime's check undone: the test fails if the check stops working.

CONFIGS = {"sgd": SGD, "adam": ADAM}
REGIME = {"clock_sgd": 0.03, "clock_l2": 3.5, "clock_adapt": 35.0}  # every clock past its threshold
EIGHT_PP = (97, 94, 92, 89)
KEEPS_80_OF_EIGHT = tuple(97 - 0.8 * (97 - a) for a in EIGHT_PP)  # Adam keeps 6.4 of SGD's 8 pp


def regime_rates(rng, truths, claim, undo, clocks=None, unfit=None, sweeps=20):
    """The verdict shares of ``claim`` on ``sweeps`` sweeps, and on the same sweeps with ``undo`` applied
    to every record (the regime's check undone)."""
    spec, counts, undone = claim_named(claim), {}, {}
    ends = {group: (clocks or {}).get(group, REGIME) for group in CONFIGS}
    for _ in range(sweeps):
        records = shared_test_sweep(rng, truths, 6, DIGITS_FITTED, CONFIGS, ends, unfit)
        for shares, cells in ((counts, records), (undone, [undo(r) for r in records])):
            verdict = evaluate_claim(spec, read_sweep(cells)).verdict
            shares[verdict] = shares.get(verdict, 0) + 1 / sweeps
    return counts, undone


def everything_fit(record):
    return dataclasses.replace(record, metrics={**record.metrics, "fit": 1.0})


def clocks_past(record):
    return dataclasses.replace(record, metrics={**record.metrics, **REGIME})


@pytest.mark.slow(seconds=20)  # 40 sweeps, each read twice
def test_sgd_that_never_fits_at_large_sigma_is_not_reproduced_against_adam():
    rng = np.random.default_rng(5)
    for unfit_runs in (6, 2):  # every run at sigma 2.5 unfit (70%), then two of six
        truths = {"sgd": on(FLAT), "adam": on(FLAT)}
        unfit = {("sgd", 2.5): (unfit_runs, 70.0)}
        rates, undone = regime_rates(rng, truths, "sgd_remembers_more_than_adaptive", everything_fit, unfit=unfit)
        assert rates.get("reproduced", 0) <= 0.10  # the bound
        assert rates.get("under-trained", 0) == pytest.approx(1.0)  # every sweep says why
        if unfit_runs == 6:  # read as fit, the 25 pp drop at sigma 2.5 is "memory": reproduced every time
            assert undone.get("reproduced", 0) >= 0.9


@pytest.mark.slow(seconds=20)
@pytest.mark.parametrize("clock, bound", [(0.5, "at most"), (30.0, "most")])
def test_adam_keeping_most_of_sgds_spread_is_contradicted_only_past_its_clock(clock, bound):
    rng = np.random.default_rng(6)
    truths = {"sgd": on(EIGHT_PP), "adam": on(KEEPS_80_OF_EIGHT)}
    clocks = {"sgd": REGIME, "adam": {"clock_sgd": clock, "clock_l2": 0.0, "clock_adapt": clock}}
    rates, undone = regime_rates(rng, truths, "adaptive_optimizers_forget", clocks_past, clocks=clocks)
    contradicted = rates.get("contradicted", 0)
    if bound == "at most":  # T_adapt 0.5, far below 3: horizon short, never contradicted
        assert contradicted <= 0.10 and rates.get("horizon short of the mechanism", 0) >= 0.9
        assert undone.get("contradicted", 0) >= 0.5  # the same sweeps with the clock past: contradicted
    else:  # T_adapt 30, far above: contradicted in most sweeps
        assert contradicted >= 0.5


def at_mid_horizon(record):
    return dataclasses.replace(record, metrics={**record.metrics, "best_val_epoch": HORIZON // 2})


@pytest.mark.slow(seconds=20)  # 40 sweeps, each read twice
def test_low_rate_sgd_still_improving_at_large_sigma_is_not_reproduced_and_converged_is():
    rng = np.random.default_rng(7)
    spec, configs, ends = claim_named("sgd_keeps_memory"), {"sgd": SGD}, {"sgd": REGIME}
    truths = {"sgd": on(FOUR_PP)}  # 4 sigmas, 6 seeds, every run fits
    still, undone, converged = {}, {}, {}
    for _ in range(20):
        late = shared_test_sweep(rng, truths, 6, DIGITS_FITTED, configs, ends, edges={"sgd": {1.4: 1.0, 2.5: 1.0}})
        mid = shared_test_sweep(rng, truths, 6, DIGITS_FITTED, configs, ends)
        for shares, cells in ((still, late), (undone, [at_mid_horizon(r) for r in late]), (converged, mid)):
            verdict = evaluate_claim(spec, read_sweep(cells)).verdict
            shares[verdict] = shares.get(verdict, 0) + 1 / 20
    assert still.get("reproduced", 0) <= 0.10 and still.get("not converged", 0) == pytest.approx(1.0)
    assert undone.get("reproduced", 0) >= 0.5  # the same sweeps read as converged: "memory"
    assert converged.get("reproduced", 0) >= 0.5


@pytest.mark.slow(seconds=10)
def test_the_headline_is_never_decided_on_sgd_past_its_clock():
    rng = np.random.default_rng(8)
    spec, configs = claim_named("sgd_keeps_memory"), {"fast": {"opt": "sgd", "lr": 0.32}}
    ends = {"fast": {"clock_sgd": 3.3, "clock_l2": 0.0, "clock_adapt": 10.0}}
    for _ in range(10):
        records = shared_test_sweep(rng, {"fast": on(FOUR_PP)}, 6, DIGITS_FITTED, configs, ends)
        found = evaluate_claim(spec, read_sweep(records))
        assert found.verdict == "not evaluated" and "T_SGD ends at most 0.3" in found.needs
