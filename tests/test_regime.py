"""The regime a verdict needs (report/regime.py): memory is decided only among runs that fit, a
contradiction only where the mechanism's clock has run and the runs were not still improving."""

from __future__ import annotations

import pytest

from initmem_core.report.claim_groups import read_sweep
from initmem_core.report.regime import CLOCK_THRESHOLDS
from initmem_core.report.verdicts import CONTRADICTED, HORIZON_SHORT, REPRODUCED, UNDER_TRAINED
from initmem_plugins.claims.paper import (
    adaptive_optimizers_forget,
    larger_batch_increases_spread,
    sgd_keeps_memory,
    sgd_remembers_more_than_adaptive,
)
from tests.builders import clocks, record

SIGMAS = (0.1, 1.0, 2.5)
WOBBLE = (0.0, 0.003, -0.003, 0.001)


def group(config: dict, accuracy: tuple[float, ...], t_adapt: float = 50.0, unfit: dict | None = None, **metrics):
    """A group over ``SIGMAS`` and four seeds; ``unfit``: sigma -> how many of its seeds did not fit."""
    unfit = unfit or {}
    return [
        record(
            {**config, "sigma": sigma, "seed": seed},
            acc + WOBBLE[seed],
            fit=seed >= unfit.get(sigma, 0),
            metrics={**clocks(0.01, 0.0, t_adapt), **metrics},
        )
        for sigma, acc in zip(SIGMAS, accuracy)
        for seed in range(4)
    ]


SGD = {"opt": "sgd", "batch_size": 32}
ADAM = {"opt": "adam", "lr": 0.001, "batch_size": 32}


def test_a_comparison_with_runs_that_did_not_fit_is_under_trained_never_reproduced():
    # SGD's spread is all large-sigma runs that never fit: a trainability gap, not memory
    records = group(SGD, (0.95, 0.90, 0.60), unfit={2.5: 4, 1.0: 1}) + group(ADAM, (0.95, 0.95, 0.94))
    found = sgd_remembers_more_than_adaptive(read_sweep(records))
    assert found.verdict == UNDER_TRAINED and found.reproduced is None
    assert "5 of 24 runs did not fit (sgd b=32: 3/4 fit at sigma 1, 0/4 fit at sigma 2.5)" in found.verdict_text
    fitted = group(SGD, (0.95, 0.90, 0.60)) + group(ADAM, (0.95, 0.95, 0.94))
    assert sgd_remembers_more_than_adaptive(read_sweep(fitted)).verdict == REPRODUCED


def test_a_contradiction_short_of_the_mechanisms_clock_is_horizon_short_and_past_it_stands():
    keeps = (0.95, 0.90, 0.80)  # Adam keeps SGD's spread: "adaptive optimizers forget" contradicted...
    past = group(SGD, keeps) + group(ADAM, keeps, t_adapt=CLOCK_THRESHOLDS["clock_adapt"] * 2)
    assert adaptive_optimizers_forget(read_sweep(past)).verdict == CONTRADICTED
    short = group(SGD, keeps) + group(ADAM, keeps, t_adapt=0.51)  # ...only once its clock has run
    found = adaptive_optimizers_forget(read_sweep(short))
    assert found.verdict == HORIZON_SHORT and "adam T_adapt 0.51 < 3" in found.verdict_text
    # a reproduction at a short horizon stands, flagged: Adam forgot before its clock ran out
    forgot = group(SGD, keeps) + group(ADAM, (0.95, 0.95, 0.95), t_adapt=0.51)
    found = adaptive_optimizers_forget(read_sweep(forgot))
    assert found.verdict == REPRODUCED and found.verdict_text.startswith("reproduced (flagged: adam T_adapt 0.51")


def test_runs_selected_at_their_last_epoch_are_a_horizon_too_short_to_contradict():
    def still_improving(config, accuracy, **kwargs):
        cells = group(config, accuracy, best_val_epoch=10, **kwargs)
        for cell in cells:
            cell.histories = {"test_acc": [(epoch, 0.5) for epoch in range(11)]}
        return cells

    keeps = (0.95, 0.90, 0.80)
    records = group(SGD, keeps) + still_improving(ADAM, keeps)
    found = adaptive_optimizers_forget(read_sweep(records))
    assert found.verdict == HORIZON_SHORT and "adam selected at its last epoch in 12 of 12 runs" in found.verdict_text


def test_the_headline_needs_every_run_of_low_rate_sgd_to_fit():
    assert sgd_keeps_memory(read_sweep(group(SGD, (0.95, 0.90, 0.80)))).verdict == REPRODUCED
    found = sgd_keeps_memory(read_sweep(group(SGD, (0.95, 0.90, 0.80), unfit={2.5: 1})))
    assert found.verdict == UNDER_TRAINED and "1 of 12 runs did not fit" in found.verdict_text


def test_a_stratum_out_of_the_regime_leaves_the_verdict_to_the_others_and_is_named():
    small, large = {**SGD, "batch_size": 32}, {**SGD, "batch_size": 128}
    fitted = group(large, (0.95, 0.85, 0.70)) + group(small, (0.95, 0.90, 0.85))
    under = [
        *group({**large, "arch": "resnet32"}, (0.95, 0.85, 0.70), unfit={2.5: 4}),
        *group({**small, "arch": "resnet32"}, (0.95, 0.90, 0.85)),
    ]
    found = larger_batch_increases_spread(read_sweep(fitted + under))
    assert found.verdict == REPRODUCED  # decided where every run fit
    assert [part.verdict for part in found.parts] == [REPRODUCED, UNDER_TRAINED]
    assert any(text.startswith("[arch=resnet32] under-trained: 4 of 24 runs") for text in found.regime)


def test_momentum_sgd_is_its_own_line_with_its_own_label():
    momentum = {**SGD, "momentum": 0.9}
    records = group(SGD, (0.95, 0.90, 0.80)) + group(ADAM, (0.95, 0.95, 0.94)) + group(momentum, (0.95, 0.94, 0.93))
    found = sgd_remembers_more_than_adaptive(read_sweep(records))
    assert [q.label for q in found.quantities] == ["sgd b=32 − adam"]  # momentum does not decide
    assert [q.label for q in found.notes] == ["momentum: sgd b=32 − sgd m=0.9 b=32"]
    assert "sgd m=0.9 b=32" in found.measured


def test_a_sweeps_closing_lines_show_each_verdict_with_its_regime():
    from rich.console import Console

    from initmem_cli.sweep import groups_table, verdicts_table
    from initmem_core.report.assessment import build_assessed_report

    records = group(SGD, (0.95, 0.90, 0.60), unfit={2.5: 4}) + group(ADAM, (0.95, 0.95, 0.94))
    report = build_assessed_report(records)
    console = Console(record=True, width=250)
    console.print(groups_table(report), verdicts_table(report))
    text = console.export_text()
    assert "8/12" in text and "12/12" in text  # runs that fit, per group
    assert "sgd_remembers_more_than_adaptive" in text and "under-trained: 4 of 24 runs did not fit" in text


def test_the_dry_run_forecasts_which_groups_will_not_reach_their_mechanisms_threshold(tmp_path):
    import json

    from typer.testing import CliRunner

    from initmem_cli.app import app

    args = ["sweep", "--opt", "sgd,adam", "--lr", "0.001", "--sigma", "0.5,1", "--seed", "0", "--train-size", "64"]
    args += ["--batch-size", "32", "--epochs", "2", "--out", str(tmp_path), "--dry-run", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    regime = {row["clock"]: row for row in json.loads(result.stdout)["regime"]}
    # Adam: 2 epochs of 2 steps at 1e-3 is T_adapt 0.004, far short of 3
    assert regime["clock_adapt"]["reaches"] == pytest.approx(0.004) and regime["clock_adapt"]["short"]
    assert regime["clock_adapt"]["threshold"] == CLOCK_THRESHOLDS["clock_adapt"]
