"""The report's error rates, checked by simulation with a known truth (docs/STATISTICS.md has the
full table from benchmarks/calibration.py). Seeded, so each rate is a fixed number: a change to
the method that makes it drift past its bound fails here.

The quick checks draw accuracy tables straight into ``report.inference``; the slow one runs the
benchmark's own settings through ``build_report`` and ``evaluate_findings``, as a real sweep does.
"""

from __future__ import annotations

import numpy as np
import pytest

from initmem_core.report.inference import cross_fit_spread, spread_difference

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


def load_calibration():
    from benchmarks import calibration

    return calibration


@pytest.mark.slow
def test_the_benchmarks_settings_through_the_report_and_the_findings():
    calibration = load_calibration()
    rng = np.random.default_rng(4)
    identical = {"sgd": calibration.on(SIGMAS, FOUR_PP), "adam": calibration.on(SIGMAS, FOUR_PP)}
    rates = calibration.verdict_rate(rng, 60, identical, 4, calibration.RUN_LEVEL)
    assert rates.get("reproduced", 0) + rates.get("contradicted", 0) <= 0.08
    below = calibration.verdict_rate(rng, 10, identical, 2, calibration.RUN_LEVEL)
    assert below == {"cannot be decided: too few seeds": 1.0}
    c = calibration.coverage(rng, 60, calibration.on(SIGMAS, FIVE_PP), 6, calibration.RUN_LEVEL, keep_at={2.5: 1})
    assert c["named"] == 1.0  # a sigma with one trained seed is named as left out, never dropped silently
    assert c["coverage"] >= 0.88
    # the clock ordering within one family of three groups that remember alike: no verdict beyond the error rate
    ordering = calibration.verdict_rate(
        rng,
        40,
        calibration.FAMILY_ALIKE,
        4,
        calibration.RUN_LEVEL,
        claim="spread_orders_by_clock_within_family",
        clocks=calibration.CLOCKS,
    )
    assert ordering.get("reproduced", 0) + ordering.get("contradicted", 0) <= 0.08


@pytest.mark.slow  # starts a process
def test_a_calibration_row_rerun_alone_or_beside_others_draws_the_same():
    calibration = load_calibration()
    quiet = lambda line: None  # noqa: E731
    alone = calibration.run_checks(3, rows={22}, log=quiet)
    beside = calibration.run_checks(3, rows={9, 22}, workers=2, log=quiet)
    other_seed = calibration.run_checks(3, seed=1, rows={22}, log=quiet)
    assert beside[0].check.startswith("identical groups below") and beside[1] == alone[0]  # its own draws
    assert other_seed[0].detail != alone[0].detail  # and the seed is what chooses them (a mean difference)


def test_rows_rerun_alone_replace_only_their_own_lines_in_the_docs_table(tmp_path):
    calibration = load_calibration()
    rows = [calibration.Row(f"check {n}", "noise", 6, "<= 6%", f"{n}.0%", number=n, sweeps=100) for n in (1, 2, 3)]
    docs = tmp_path / "STATISTICS.md"
    docs.write_text(f"before\n{calibration.BEGIN}\nold\n{calibration.END}\nafter\n")
    calibration.write_docs(calibration.markdown(rows, 100, 60.0), docs)
    again = [calibration.Row("check 2", "noise", 6, "<= 6%", "9.9%", number=2, sweeps=1000)]
    calibration.write_docs(calibration.markdown(again, 1000, 60.0, options=" --rows 2"), docs, merge=True)
    lines = docs.read_text().splitlines()
    table = [line for line in lines if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert [line.split("|")[1].strip() for line in table] == ["1", "2", "3"]  # kept, in order
    assert "| 1000 |" in table[1] and "9.9%" in table[1] and "1.0%" in table[0] and "3.0%" in table[2]
    assert lines[0] == "before" and lines[-1] == "after" and "--rows 2" in docs.read_text()
