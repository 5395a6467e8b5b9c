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


def test_the_regime_rows_are_copied_into_the_regime_block_of_the_docs(tmp_path):
    calibration = load_calibration()
    regime = calibration.regime_row_numbers()
    assert regime and regime == list(range(regime[0], regime[0] + len(regime)))  # one run of rows: 147-156
    docs = tmp_path / "STATISTICS.md"
    docs.write_text(
        f"a\n{calibration.REGIME_BEGIN}\n{calibration.REGIME_END}\nb\n{calibration.BEGIN}\n{calibration.END}\n"
    )
    rows = [calibration.Row(f"check {n}", "noise", 6, "<= 10%", "1.0%", number=n, sweeps=50) for n in (1, regime[0])]
    calibration.write_docs(calibration.markdown(rows, 50, 6.0), docs, merge=True)
    text = docs.read_text()
    block = text[text.index(calibration.REGIME_BEGIN) : text.index(calibration.REGIME_END)]
    assert f"| {regime[0]} | check {regime[0]} |" in block and "| 1 | check 1 |" not in block
    assert calibration.COLUMNS in block
    table = text[text.index(calibration.BEGIN) :]
    assert "| 1 | check 1 |" in table and f"| {regime[0]} | check {regime[0]} |" in table  # the table keeps both
    again = [calibration.Row(f"check {regime[1]}", "noise", 6, "<= 10%", "2.0%", number=regime[1], sweeps=50)]
    calibration.write_docs(calibration.markdown(again, 50, 6.0), docs, merge=True)  # a later row alone
    text = docs.read_text()
    block = text[text.index(calibration.REGIME_BEGIN) : text.index(calibration.REGIME_END)]
    assert f"| {regime[0]} | check {regime[0]} |" in block and f"| {regime[1]} | check {regime[1]} |" in block


# -- The regime a verdict needs (report/regime.py), on the noise fitted to the exports. Each test
# asserts the bound against the simulated rate and checks, on the same sweeps, that the rate would
# break it with the regime's check undone: the test fails if the check stops working.


def test_sgd_that_never_fits_at_large_sigma_is_not_reproduced_against_adam():
    calibration = load_calibration()
    rng = np.random.default_rng(5)
    for unfit_runs in (6, 2):  # every run at sigma 2.5 unfit, then two of six
        truths = {"sgd": calibration.on(SIGMAS, FLAT), "adam": calibration.on(SIGMAS, FLAT)}
        rates, undone = calibration.regime_rates(
            rng,
            20,
            truths,
            6,
            calibration.DIGITS_FITTED,
            calibration.FIRST_CLAIM,
            calibration._everything_fit,
            unfit={("sgd", 2.5): (unfit_runs, calibration.UNFIT_ACCURACY)},
        )
        assert rates.get("reproduced", 0) <= 0.10  # the issue's bound
        assert rates.get("under-trained", 0) == 1.0  # every sweep says why
        if unfit_runs == 6:  # read as fit, the 25 pp drop at sigma 2.5 is "memory": reproduced every time
            assert undone.get("reproduced", 0) >= 0.9


@pytest.mark.parametrize("clock, bound", [(0.5, "at most"), (30.0, "most")])
def test_adam_keeping_most_of_sgds_spread_is_contradicted_only_past_its_clock(clock, bound):
    calibration = load_calibration()
    rng = np.random.default_rng(6)
    truths = {
        "sgd": calibration.on(SIGMAS, calibration.EIGHT_PP),
        "adam": calibration.on(SIGMAS, calibration.KEEPS_80_OF_EIGHT),
    }
    rates, undone = calibration.regime_rates(
        rng,
        20,
        truths,
        6,
        calibration.DIGITS_FITTED,
        "adaptive_optimizers_forget",
        calibration._clocks_past,
        clocks={"sgd": 0.03, "adam": clock},
    )
    contradicted = rates.get("contradicted", 0)
    if bound == "at most":  # T_adapt 0.5, far below 3: horizon short, never contradicted
        assert contradicted <= 0.10 and rates.get("horizon short of the mechanism", 0) >= 0.9
        assert undone.get("contradicted", 0) >= 0.5  # the same sweeps with the clock past: contradicted
    else:  # T_adapt 30, far above: contradicted in most sweeps
        assert contradicted >= 0.5


def test_identical_groups_inside_the_regime_get_no_more_verdicts_than_before():
    calibration = load_calibration()
    rng = np.random.default_rng(7)
    counts: dict[str, int] = {}
    for _ in range(40):
        verdict = calibration.claim_verdict(
            calibration.shared_test_sweep(rng, calibration.IDENTICAL, 4, calibration.DIGITS_FITTED)
        )
        counts[verdict] = counts.get(verdict, 0) + 1
    assert counts.get("under-trained", 0) + counts.get("horizon short of the mechanism", 0) == 0  # in the regime
    assert (counts.get("reproduced", 0) + counts.get("contradicted", 0)) / 40 <= 0.125  # 5% nominal, 40 sweeps


def test_a_row_that_names_no_clocks_is_inside_the_regime():
    calibration = load_calibration()
    (record,) = [
        r
        for r in calibration.synthetic_sweep(np.random.default_rng(8), {"adam": {0.1: 95}}, 1, calibration.PER_EXAMPLE)
    ]
    assert record.metrics["clock_adapt"] >= 3 and record.metrics["fit"] == 1.0
    (l2,) = calibration.synthetic_sweep(np.random.default_rng(8), {"sgd-l2": {0.1: 95}}, 1, calibration.PER_EXAMPLE)
    assert l2.metrics["clock_l2"] >= 3


# -- The noise model (benchmarks/noise_model.py)


@pytest.mark.slow(seconds=30)
def test_the_noise_fit_recovers_a_known_truth():
    """Cells drawn from the model with known sds (digits-like: 20 cells of 6 runs on 360 examples,
    one test set), fitted as the exports are."""
    from scipy import special

    from benchmarks import noise_model

    rng = np.random.default_rng(9)
    difficulty, specific, run = 3.0, 0.8, 0.4
    shared = rng.normal(0, difficulty, 360)
    cells = []
    for index, accuracy in enumerate(np.linspace(90, 99, 20)):
        level = load_calibration().population_level(accuracy, np.hypot(np.hypot(difficulty, specific), run))
        logits = level + shared + rng.normal(0, specific, 360) + rng.normal(0, run, 6)[:, None]
        cells.append(noise_model.Cell("synthetic", str(index), 1.0, rng.random((6, 360)) < special.expit(logits)))
    fitted = noise_model.fit_dataset("synthetic", cells)
    assert abs(fitted.total - np.hypot(difficulty, specific)) < 0.4
    assert abs(fitted.specific - specific) < 0.4
    assert abs(fitted.run - run) < 3 * fitted.run_se + 0.05


@pytest.mark.slow(seconds=40)
def test_the_fitted_figures_in_the_calibration_are_the_exports():
    from benchmarks import noise_model

    calibration = load_calibration()
    fitted, _ = noise_model.fit_exports()
    for f in fitted:
        assert calibration.FITTED[f.dataset] == {
            "difficulty": round(f.difficulty, 2),
            "specific": round(f.specific, 2),
            "run": round(f.run, 2),
        }


def measured_rows() -> dict[int, list[str]]:
    """The calibration table of docs/STATISTICS.md: row number -> its cells."""
    from pathlib import Path

    calibration = load_calibration()
    text = (Path(__file__).resolve().parents[1] / "docs" / "STATISTICS.md").read_text()
    table = text[text.index(calibration.BEGIN) : text.index(calibration.END)]
    return {
        int(line.split("|")[1]): [cell.strip() for cell in line.split("|")[1:-1]]
        for line in table.splitlines()
        if line.startswith("| ") and line.split("|")[1].strip().isdigit()
    }


def test_the_regime_rows_in_the_docs_meet_the_issues_bounds():
    """What docs/STATISTICS.md says rows 147-156 measured: never fit at large sigma, not reproduced in more
    than 10%; T_adapt far below the threshold, not contradicted in more than 10%; far above, in most."""
    calibration = load_calibration()
    rows = measured_rows()
    numbers = calibration.regime_row_numbers()
    rate = {n: float(rows[n][6].split("%")[0]) / 100 for n in numbers}
    for (check, args), n in zip(calibration.regime_checks(), numbers):
        assert rows[n][2] == args[0].name and int(rows[n][3]) == args[1]  # the row as the code defines it
        if check is calibration.never_fits_at_large_sigma:
            assert rate[n] <= 0.10 and "under-trained 100.0%" in rows[n][7]
        elif check is calibration.adam_keeps_most:
            assert rate[n] <= 0.10 if args[2] < 3 else rate[n] > 0.5
        else:
            assert rate[n] <= 0.06
