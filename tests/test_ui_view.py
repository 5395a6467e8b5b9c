"""Issue 13 without a server: group labels and run names that describe a cell, the prepared MLflow
view's state, the parent's description, and terminal tables that never cut a value."""

from __future__ import annotations

import json
import math
import re

import pytest
from rich.console import Console

from initmem_cli.tables import fitted_tables
from initmem_core.config import RunConfig
from initmem_core.groups import group_label
from initmem_core.report.description import description
from initmem_core.report.memory import build_report
from initmem_core.sweep.grid import cell_names, plan_sweep
from initmem_core.tracking.ui_view import view_key, view_state
from tests.builders import cell, record


def test_two_sweeps_with_different_learning_rates_never_share_a_group_label():
    first = plan_sweep({"opt": "adam,sgd", "lr": "0.001", "sigma": "0.5,1"})
    second = plan_sweep({"opt": "adam,sgd", "lr": "0.0001", "sigma": "0.5,1"})
    assert not set(first.groups) & set(second.groups)
    assert "opt=adam,lr=0.001" in first.groups and "opt=adam,lr=0.0001" in second.groups


def test_a_group_label_depends_on_the_group_alone_not_on_the_rest_of_the_sweep():
    # the old labels left out a sweep's most common value: `opt=adam` meant different lrs in different sweeps
    alone = plan_sweep({"opt": "adam", "lr": "0.001", "sigma": "0.5,1"})
    mixed = plan_sweep({"opt": "adam", "lr": "0.001,0.001001,0.002", "sigma": "0.5,1"})
    assert set(alone.groups) < set(mixed.groups)
    assert len(set(mixed.groups)) == 3  # 0.001 and 0.001001 stay apart
    assert group_label(RunConfig(opt="adam", lr=0.001, sigma=4.0, seed=3)) == "opt=adam,lr=0.001"


def test_cell_names_carry_every_varying_value_and_are_unique():
    plan = plan_sweep({"opt": "adam,sgd", "lr": "0.05,0.0001,0.001", "sigma": "0.5,1", "batch_size": "32,64"})
    assert len(set(plan.names)) == len(plan.cells) == 24
    assert "resnet20-adam-lr0.001-b32-s0.5-seed0" in plan.names
    for name, config in zip(plan.names, plan.cells):
        assert f"lr{config.lr:.12g}" in name and f"s{config.sigma:g}" in name and config.opt in name


def test_cell_names_stay_unique_when_two_values_print_alike():
    configs = [RunConfig(data="digits"), RunConfig(data="digits", augment="on")]
    names = cell_names(configs, ["augment"])
    assert names[0] != names[1] and names[1].startswith("resnet20-sgd-on-")


def test_the_view_filters_to_the_sweep_groups_by_group_and_shows_the_chosen_columns():
    state = view_state("a" * 32)
    assert state["searchFilter"] == f"tags.`mlflow.parentRunId` = '{'a' * 32}'"
    assert state["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "initmem.group"}]
    for column in (
        "params.`sigma`",
        "params.`opt`",
        "params.`lr`",
        "params.`batch_size`",
        "params.`seed`",
        "metrics.`best_val_test_acc`",
        "metrics.`tau_interp`",
        "metrics.`weight_norm_ratio`",
    ):
        assert column in state["selectedColumns"]
    [scatter] = [c for c in state["compareRunCharts"] if c["type"] == "SCATTER"]
    assert (scatter["xaxis"]["key"], scatter["yaxis"]["key"]) == ("sigma", "best_val_test_acc")
    json.dumps(state)  # stored as JSON in an experiment tag
    assert view_key("a") == view_key("a") != view_key("b")
    assert re.fullmatch(r"[\w\-.]+", view_key("sweep with spaces/and:colons"))


def test_the_parent_description_holds_the_spread_table_and_links_its_view_and_plots():
    report = build_report(
        [
            cell("sgd", 0.5, 0, 0.5),
            cell("sgd", 2.0, 0, 0.75),
            cell("adam", 0.5, 0, 0.6),
            cell("adam", 2.0, 0, 0.6),
        ]
    )
    text = description(report, "demo", "7", "r" * 32, "initmem-k")
    spreads = {g.group: g.spread for g in report.groups}
    assert f"| opt=sgd | {spreads['opt=sgd']:.2f} |" in text and f"| opt=adam | {spreads['opt=adam']:.2f} |" in text
    assert not math.isclose(spreads["opt=sgd"], spreads["opt=adam"])
    assert "(/#/experiments/7/runs?viewStateShareKey=initmem-k&workflowType=machine_learning)" in text
    assert (
        "(/#/experiments/7/runs?viewStateShareKey=initmem-k&workflowType=machine_learning&compareRunsMode=CHART)"
        in text
    )
    assert f"(/#/experiments/7/runs/{'r' * 32}/artifacts/report/test_acc_vs_sigma.png)" in text
    # beside the paper's spread, the debiased one; one seed per sigma measures none, and it says why
    assert "debiased pp [95% interval]" in text and "fewer than two sigmas with enough trained runs" in text


def test_the_parent_description_shows_the_debiased_spread_with_its_interval():
    report = build_report(
        [cell("sgd", s, seed, acc + 0.01 * seed) for seed in range(4) for s, acc in ((0.5, 0.5), (2.0, 0.75))]
    )
    g = report.groups[0]
    text = description(report, "demo", "7", "r" * 32, "initmem-k")
    assert f"| {g.debiased_spread:+.2f} [{g.debiased_spread_lo:+.2f}, {g.debiased_spread_hi:+.2f}] |" in text


@pytest.mark.parametrize("width", [80, 50])
def test_tables_fold_rather_than_cut_on_a_narrow_terminal(width):
    headers = ["sigma", "test acc %", "a long header that wraps", "tau_interp", "‖W‖/‖W0‖", "T_SGD"]
    rows = [
        ["0.5", "12.34", "1.2345e-08", "123456789", "1.0001", "0.0012345"],
        ["2", "99.99", "x" * (width + 10), "–", "1", "3"],
    ]  # one value wider than the terminal
    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    console.print(*fitted_tables("a title", headers, rows, width, right=(1, 2, 3, 4, 5)))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    flat = re.sub(r"[\s│┃]", "", text)
    for value in [v for row in rows for v in row] + [w for h in headers for w in h.split()]:
        assert value in flat, value


def test_the_report_keeps_every_number_of_long_labelled_groups_whole_at_80_columns():
    from initmem_cli.report import rich_tables

    base = dict(epochs=2, train_size=256, batch_size=32)  # constants of the sweep make labels long
    records = [
        record(
            RunConfig(opt=opt, lr=lr, sigma=sigma, seed=seed, **base),
            acc,
            metrics={"weight_norm": 13.3, "clock_sgd": 3.125e-4},
        )
        for opt, lr in (("sgd", 0.05), ("adam", 0.001))
        for sigma, seed, acc in ((0.5, 0, 0.80), (0.5, 1, 0.84), (2.0, 0, 0.60), (2.0, 1, 0.71))
    ]
    report = build_report(records)
    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    console.print(*rich_tables(report, "t", 80))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    (pair,) = report.pairs
    for number in (f"{pair.spread_diff:+.2f}", f"{pair.acc_diff:+.2f}", "0.0003125"):
        assert any(number in line for line in text.splitlines()), number  # on one line, not folded
