"""The regime a verdict needs (report/regime.py): memory is decided only among runs that fit and only
where every sigma of every compared group has converged; a contradiction only where the mechanism's
clock has run."""

from __future__ import annotations

import pytest

from initmem_core.report.claim_groups import read_sweep
from initmem_core.report.regime import CLOCK_THRESHOLDS, EDGE_FRACTION, at_edge
from initmem_core.report.verdicts import (
    CONTRADICTED,
    HORIZON_SHORT,
    NOT_CONVERGED,
    NOT_EVALUATED,
    REPRODUCED,
    UNDER_TRAINED,
)
from tests.support.builders import claim, clocks, record

adaptive_optimizers_forget = claim("adaptive_optimizers_forget")
larger_batch_increases_spread = claim("larger_batch_increases_spread")
sgd_keeps_memory = claim("sgd_keeps_memory")
sgd_remembers_more_than_adaptive = claim("sgd_remembers_more_than_adaptive")

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
    assert found.verdict == HORIZON_SHORT and "adam lr=0.001 b=32 T_adapt 0.51 < 3" in found.verdict_text
    # a reproduction at a short horizon stands, flagged: Adam forgot before its clock ran out
    forgot = group(SGD, keeps) + group(ADAM, (0.95, 0.95, 0.95), t_adapt=0.51)
    found = adaptive_optimizers_forget(read_sweep(forgot))
    assert found.verdict == REPRODUCED and found.verdict_text.startswith(
        "reproduced (flagged: adam lr=0.001 b=32 T_adapt"
    )


def selected_at(cells, best: int, last: int = 30, sigmas=SIGMAS, patience: bool = False):
    """``cells`` at ``sigmas`` selected at epoch ``best`` of histories that end at ``last``."""
    for cell in cells:
        if cell.config.sigma in sigmas:
            cell.metrics["best_val_epoch"] = best
            cell.config = cell.config.replace(patience=3 if patience else 0)
            cell.stop_reason = "patience" if patience else "epochs"
            cell.histories = {"val_loss": [(epoch, 1.0 / (1 + epoch)) for epoch in range(last + 1)]}
    return cells


def test_the_edge_is_the_last_tenth_of_the_epochs_a_run_trained_and_never_a_patience_stop():
    assert EDGE_FRACTION == 0.1
    (cell,) = selected_at(group(SGD, (0.9, 0.9, 0.9))[:1], best=27)
    assert at_edge(cell) is False  # epoch 27 of 30: the last tenth is epochs 28-30
    for best in (28, 29, 30):
        assert at_edge(selected_at([cell], best=best)[0]) is True
    assert at_edge(selected_at([cell], best=29, last=60, patience=True)[0]) is False  # it stopped on its own
    assert at_edge(selected_at([cell], best=3, last=3)[0]) is True  # short runs: the last point is the edge
    assert at_edge(group(SGD, (0.9, 0.9, 0.9))[0]) is None  # no history: cannot tell


def test_a_spread_read_before_every_sigma_converged_is_its_own_verdict_never_reproduced():
    # low-rate SGD remembers on paper, but its sigma-2.5 runs were all still improving at the horizon
    remembering = (0.95, 0.90, 0.80)
    converged = selected_at(group(SGD, remembering), best=15)
    assert sgd_keeps_memory(read_sweep(converged)).verdict == REPRODUCED
    late = selected_at(selected_at(group(SGD, remembering), best=15), best=30, sigmas=(2.5,))
    found = sgd_keeps_memory(read_sweep(late))
    assert found.verdict == NOT_CONVERGED and found.reproduced is None
    assert found.verdict_text == "not converged: sgd b=32: 4/4 selected at the horizon's edge at sigma 2.5"
    # the report's per-sigma table counts them too
    from initmem_core.report.memory import build_report

    assert {row.sigma: row.at_edge for row in build_report(late).rows} == {0.1: "0/4", 1.0: "0/4", 2.5: "4/4"}
    # pooled over the group only 4 of 12 runs sit at the edge: the old check would have let it stand
    two_of_four = selected_at(group(SGD, remembering), best=15)
    selected_at([c for c in two_of_four if c.config.sigma == 2.5][:2], best=30)
    assert sgd_keeps_memory(read_sweep(two_of_four)).verdict == REPRODUCED  # half is not most
    # a run stopped by its patience converged by its own criterion, wherever its best epoch sits
    patient = selected_at(group(SGD, remembering), best=29, patience=True)
    assert sgd_keeps_memory(read_sweep(patient)).verdict == REPRODUCED


def test_a_contradiction_from_an_unconverged_adaptive_group_is_not_converged():
    keeps = (0.95, 0.90, 0.80)
    records = selected_at(group(SGD, keeps), best=15) + selected_at(group(ADAM, keeps), best=30)
    found = adaptive_optimizers_forget(read_sweep(records))
    assert found.verdict == NOT_CONVERGED and "adam lr=0.001 b=32: 4/4 selected" in found.verdict_text


def test_norms_are_read_whatever_the_selection_so_convergence_does_not_gate_them():
    norms_coupled_for_sgd_not_adaptive = claim("norms_coupled_for_sgd_not_adaptive")

    records = group(SGD, (0.95, 0.90, 0.80), weight_norm=2.0, weight_norm_ratio=1.0)
    records += group(ADAM, (0.95, 0.95, 0.94), weight_norm=2.0, weight_norm_ratio=1.0)
    found = norms_coupled_for_sgd_not_adaptive(read_sweep(selected_at(records, best=30)))
    assert found.verdict != NOT_CONVERGED


def test_low_rate_is_a_clock_not_the_lowest_rate_present():
    fast = {**SGD, "lr": 0.32}
    # SGD at lr 0.32 ran T_SGD 3.3: past its forgetting clock, never the remembering baseline
    only_fast = [
        record({**c.config.__dict__}, c.metrics["best_val_test_acc"], metrics={**c.metrics, **clocks(3.3, 0, 50)})
        for c in group(fast, (0.95, 0.90, 0.80))
    ]
    found = sgd_keeps_memory(read_sweep(only_fast))
    assert found.verdict == NOT_EVALUATED and "T_SGD ends at most 0.3" in found.needs
    found = larger_batch_increases_spread(
        read_sweep(
            only_fast
            + [
                record({**c.config.__dict__, "batch_size": 128}, c.metrics["best_val_test_acc"], metrics=c.metrics)
                for c in only_fast
            ]
        )
    )
    assert found.verdict == NOT_EVALUATED  # the batch claim needs low-rate groups too
    slow = group({**SGD, "lr": 0.01}, (0.95, 0.90, 0.80))  # T_SGD 0.01: low rate
    found = sgd_keeps_memory(read_sweep(only_fast + slow))
    assert found.verdict == REPRODUCED and "sgd lr=0.01 b=32" in found.measured


def test_the_batch_claim_reads_equal_epochs_and_equal_steps_each_labelled():
    small = {**SGD, "lr": 0.01, "epochs": 10}
    epochs = {**small, "batch_size": 128}
    steps = {**small, "batch_size": 128, "epochs": 40}  # 4x the batch, 4x the epochs: the same steps

    def at(config, accuracy, t_sgd, t_adapt):
        return group(config, accuracy, t_adapt=t_adapt, clock_sgd=t_sgd)

    records = at(small, (0.95, 0.93, 0.91), 0.004, 3.4) + at(epochs, (0.95, 0.90, 0.80), 0.001, 0.85)
    records += at(steps, (0.95, 0.90, 0.82), 0.004 / 4, 3.4)
    found = larger_batch_increases_spread(read_sweep(records))
    labels = [q.label for q in found.quantities]
    assert labels == [
        "sgd lr=0.01 b=128 − sgd lr=0.01 b=32 (equal epochs)",
        "sgd lr=0.01 b=128 − sgd lr=0.01 b=32 (equal steps)",
    ]
    assert found.verdict == REPRODUCED
    # trained to convergence (--patience), neither count is imposed: the pair says so
    patient = [*at({**small, "patience": 10}, (0.95, 0.93, 0.91), 0.004, 3.4)]
    patient += at({**epochs, "patience": 10}, (0.95, 0.90, 0.80), 0.001, 0.85)
    (quantity,) = larger_batch_increases_spread(read_sweep(patient)).quantities
    assert quantity.label == "sgd lr=0.01 b=128 − sgd lr=0.01 b=32 (each to convergence)"


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
    assert [q.label for q in found.quantities] == ["sgd b=32 − adam lr=0.001 b=32"]  # momentum does not decide
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
