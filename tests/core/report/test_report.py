"""The report from hand-made records: spread and per-sigma figures against a hand computation."""

from __future__ import annotations

import csv
import io
import json
import math
import re

import pytest

from initmem_core.config import RunConfig
from initmem_core.report.files import write_report_files
from initmem_core.report.memory import build_report
from initmem_core.report.render import to_csv, to_json, to_markdown
from tests.support.builders import clocks, record

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def cell(opt, sigma, seed, acc, tau=None, status="FINISHED", diverged=False, norm=10.0):
    metrics = {"weight_norm": norm, "weight_norm_ratio": norm / 10, **clocks(0.01, 0.0, 2.0 if opt == "sgd" else 3.0)}
    if tau is not None:
        metrics.update(tau_interp=tau, repair_gap=0.02)
    return record(
        RunConfig(opt=opt, sigma=sigma, seed=seed),
        acc,
        status=status,
        metrics=metrics,
        weight_norms=[(0, norm * 0.9), (1, norm)],
        diverged=diverged,
        error="diverged in epoch 1: the training loss is not finite" if diverged else "",
        run_id=f"{opt}-{sigma}-{seed}",
    )


@pytest.fixture
def records():
    return [
        # sgd remembers: 82, 91, 65 % -> spread 26 pp; sigma 2 never interpolates
        cell("sgd", 0.5, 0, 0.80, tau=5),
        cell("sgd", 0.5, 1, 0.84, tau=7),
        cell("sgd", 1.0, 0, 0.90, tau=4),
        cell("sgd", 1.0, 1, 0.92, tau=4),
        cell("sgd", 2.0, 0, 0.60, norm=40.0),
        cell("sgd", 2.0, 1, 0.70, norm=40.0),
        # adam forgets: 89, 91, 87 % -> spread 4 pp; one diverged cell is a failure, not a 0% point
        cell("adam", 0.5, 0, 0.88, tau=3),
        cell("adam", 0.5, 1, 0.90, tau=3),
        cell("adam", 1.0, 0, 0.90, tau=3),
        cell("adam", 1.0, 1, 0.92, tau=3),
        cell("adam", 2.0, 0, 0.87, tau=3),
        cell("adam", 2.0, 1, 0.10, status="FAILED", diverged=True),
    ]


def test_spread_per_group_matches_the_hand_computation(records):
    report = build_report(records)
    assert report.group_fields == ["opt"]
    groups = {g.group: g for g in report.groups}
    assert set(groups) == {"opt=sgd", "opt=adam"}
    sgd, adam = groups["opt=sgd"], groups["opt=adam"]
    assert sgd.spread == pytest.approx(91.0 - 65.0)
    assert (sgd.best_sigma, sgd.worst_sigma) == (1.0, 2.0)
    assert adam.spread == pytest.approx(91.0 - 87.0)
    assert (adam.failed, sgd.failed) == (1, 0)
    assert (sgd.never_interp_sigmas, adam.never_interp_sigmas) == (1, 0)
    assert (sgd.clock_adapt, adam.clock_adapt) == (2.0, 3.0)


def test_per_sigma_rows(records):
    rows = {(r.group, r.sigma): r for r in build_report(records).rows}
    low = rows[("opt=sgd", 0.5)]
    assert low.test_acc == pytest.approx(82.0)
    assert low.test_acc_std == pytest.approx(math.sqrt(8.0))  # sample std of 80 and 84
    assert (low.tau_interp, low.never_interp) == (6.0, 0)
    assert low.repair_gap == pytest.approx(2.0)
    high = rows[("opt=sgd", 2.0)]
    assert math.isnan(high.tau_interp) and high.never_interp == 2 and math.isnan(high.repair_gap)
    assert (high.weight_norm, high.weight_norm_ratio) == (40.0, 4.0)
    diverged = rows[("opt=adam", 2.0)]
    assert (diverged.runs, diverged.failed, diverged.test_acc) == (2, 1, pytest.approx(87.0))
    assert math.isnan(diverged.test_acc_std)  # one trained seed left


def test_failures_are_listed_and_parent_metrics_are_named_per_group(records):
    report = build_report(records)
    [failure] = report.failures
    assert (failure.group, failure.sigma, failure.seed, failure.status) == ("opt=adam", 2.0, 1, "DIVERGED")
    assert "diverged in epoch 1" in failure.error
    metrics = report.parent_metrics()
    assert metrics["spread_opt-sgd"] == pytest.approx(26.0)
    assert metrics["spread_opt-adam"] == pytest.approx(4.0)
    assert metrics["failed_cells_opt-adam"] == 1.0
    assert metrics["never_interp_sigmas_opt-sgd"] == 1.0
    assert metrics["clock_adapt_opt-sgd"] == 2.0
    # the norm plot draws only trained cells
    assert len(report.norm_curves["opt=adam"]) == 5 and len(report.norm_curves["opt=sgd"]) == 6


def test_a_sweep_without_varying_fields_is_one_group_named_by_its_config():
    # Named by what it trains, as in any other sweep (labels never depend on the sweep)
    report = build_report([cell("sgd", 0.5, 0, 0.5), cell("sgd", 1.0, 0, 0.75)])
    assert [(g.group, g.spread) for g in report.groups] == [("opt=sgd", pytest.approx(25.0))]
    assert list(report.parent_metrics()) == [
        "spread_opt-sgd",
        "never_interp_sigmas_opt-sgd",
        "failed_cells_opt-sgd",
        "unfit_runs_opt-sgd",
        "clock_sgd_opt-sgd",
        "clock_l2_opt-sgd",
        "clock_adapt_opt-sgd",
        "spread_lo_opt-sgd",
        "spread_hi_opt-sgd",
        "did_not_train_opt-sgd",
    ]


def test_csv_markdown_and_json_hold_the_same_table(records):
    report = build_report(records)
    rows = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert len(rows) == 6
    sgd_high = next(r for r in rows if r["group"] == "opt=sgd" and r["sigma"] == "2.0")
    assert float(sgd_high["spread"]) == pytest.approx(26.0) and sgd_high["tau_interp"] == ""
    markdown = to_markdown(report)
    # paper's spread, its interval, the debiased one (two seeds: no interval, and why), sigmas, counts, runs that fit
    assert re.search(
        r"\| sgd \| 26\.00 \| \[[\d.]+, [\d.]+\] \| \+26\.00 \(no interval: too few seeds to decide "
        r"\(2 < 3\)\) \| 1 \| 2 \| 1 \| 6/6 \| 0 \|",
        markdown,
    ), markdown
    assert "## Failed cells" in markdown and "DIVERGED" in markdown
    data = json.loads(to_json(report))
    assert {g["group"]: g["spread"] for g in data["groups"]} == pytest.approx({"opt=adam": 4.0, "opt=sgd": 26.0})
    assert data["group_fields"] == ["opt"] and len(data["rows"]) == 6 and len(data["failures"]) == 1


def test_report_files_are_tables_and_valid_pngs(records, tmp_path):
    from matplotlib import image

    files = write_report_files(build_report(records), tmp_path / "out")
    names = sorted(p.name for p in files)
    assert names == [
        "memory_vs_clock.png",
        "memory_vs_epoch.png",
        "report.csv",
        "report.md",
        "spread_vs_clocks.png",
        "tau_interp_vs_sigma.png",
        "test_acc_vs_sigma.png",
        "weight_norm_vs_epoch.png",
    ]
    for path in files:
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == PNG_SIGNATURE
            height, width, _ = image.imread(path).shape
            assert height > 200 and width > 200


def test_short_labels_name_only_what_tells_the_groups_apart_and_say_once_what_they_share():
    from initmem_core.groups import short_labels

    timm = "arch=timm:resnet10t,opt={},epochs=3,data=fashion-mnist,train_size=256,eval_size=500"
    names, shared = short_labels([timm.format("adamw,lr=0.001"), timm.format("sgd")])
    assert list(names.values()) == ["adamw,lr=0.001", "sgd"]
    assert shared == "arch=timm:resnet10t, epochs=3, data=fashion-mnist, train_size=256, eval_size=500"
    # groups that differ in the rate alone are named by it; a shared optimizer goes with the rest
    names, shared = short_labels(["opt=sgd,lr=0.01,epochs=3", "opt=sgd,lr=0.1,epochs=3"])
    assert list(names.values()) == ["lr=0.01", "lr=0.1"] and shared == "opt=sgd, epochs=3"
    # a group at the default of what sets the others apart names that default; fields by their short names
    names, _ = short_labels(["opt=sgd,epochs=40", "opt=sgd,lr=0.1,batch_size=32,epochs=40"])
    assert list(names.values()) == ["lr=default,b=64", "lr=0.1,b=32"]
    # values that hold commas and equals signs stay whole; one group alone is named by its optimizer
    names, _ = short_labels(["opt=lion,opt_arg=betas=0.9,0.99,until=clock_sgd=0.05", "opt=lion"])
    assert list(names.values()) == ["opt_arg=betas=0.9,0.99,clock_sgd=0.05", "opt_arg=default,until=default"]
    assert short_labels(["arch=resnet56,opt=adam,lr=0.001"]) == (
        {"arch=resnet56,opt=adam,lr=0.001": "adam"},
        "arch=resnet56, lr=0.001",
    )
    assert short_labels([]) == ({}, "")


def test_figures_name_groups_by_what_tells_them_apart(records, monkeypatch, tmp_path):
    import dataclasses

    from initmem_plugins.figures import plots

    long = [dataclasses.replace(r, config=dataclasses.replace(r.config, epochs=40, schedule="cosine")) for r in records]
    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda figure, path: drawn.append(figure) or path)
    plots.accuracy_vs_sigma(build_report(long), tmp_path / "acc.png")
    legend = [text.get_text() for text in drawn[0].legends[0].get_texts()]
    assert [label.split(" (")[0] for label in legend] == ["adam", "sgd"]
    assert drawn[0].legends[0].get_title().get_text() == "every group: epochs=40, schedule=cosine"
    plots.spread_vs_clocks(build_report(long), tmp_path / "clocks.png")  # one colour per group, named below
    assert [text.get_text() for text in drawn[1].legends[0].get_texts()] == ["adam", "sgd"]


def test_the_sweep_summary_table_names_groups_by_what_tells_them_apart(records):
    import dataclasses

    from rich.console import Console

    from initmem_cli.sweep import groups_table

    long = [dataclasses.replace(r, config=dataclasses.replace(r.config, epochs=40)) for r in records]
    console = Console(record=True, width=200)
    console.print(groups_table(build_report(long)))
    text = console.export_text()
    rows = [line for line in text.splitlines() if "/" in line]  # runs fit, "5/5"
    assert [row.split("│")[1].strip() for row in rows] == ["adam", "sgd"]
    assert "every group: epochs=40" in text


def test_two_groups_that_differ_only_in_rate_have_one_short_name_everywhere(monkeypatch, tmp_path):
    """One name per group: the terminal, Markdown, JSON, the figures' legend and the MLflow view's
    grouping tag all call a group by its short label; JSON and Markdown keep the full key."""
    from rich.console import Console

    from initmem_cli.sweep import groups_table
    from initmem_core.groups import short_labels
    from initmem_core.sweep.grid import plan_sweep
    from initmem_plugins.figures import plots

    fixed = {"arch": "timm:resnet10t", "opt": "adamw", "epochs": 3, "data": "fashion-mnist", "train_size": 256}
    report = build_report(
        [
            record(RunConfig(**fixed, lr=lr, sigma=sigma, seed=seed), acc + 0.01 * seed)
            for lr, accs in ((0.001, (0.8, 0.6)), (0.003, (0.7, 0.69)))
            for sigma, acc in zip((0.5, 2.0), accs)
            for seed in range(2)
        ]
    )
    labels = ["lr=0.001", "lr=0.003"]
    assert [g.label for g in report.groups] == labels
    shared = "arch=timm:resnet10t, opt=adamw, epochs=3, data=fashion-mnist, train_size=256"
    assert report.shared == shared
    console = Console(record=True, width=200)
    console.print(groups_table(report))
    terminal = console.export_text()
    assert [line.split("│")[1].strip() for line in terminal.splitlines() if "/" in line] == labels
    assert f"every group: {shared}" in terminal
    markdown = to_markdown(report)
    assert all(f"| {label} | " in markdown for label in labels) and "arch=timm:resnet10t,opt=" not in markdown
    assert f"Every group: {shared}." in markdown
    data = json.loads(to_json(report))
    assert [(g["label"], g["group"]) for g in data["groups"]] == [(g.label, g.group) for g in report.groups]
    assert (
        data["groups"][0]["group"]
        == "arch=timm:resnet10t,opt=adamw,lr=0.001,epochs=3,data=fashion-mnist,train_size=256"
    )
    assert {row["label"] for row in data["rows"]} == set(labels) and data["shared"] == shared
    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda figure, path: drawn.append(figure) or path)
    plots.accuracy_vs_sigma(report, tmp_path / "acc.png")
    legend = drawn[0].legends[0]
    assert [text.get_text().split(" (")[0] for text in legend.get_texts()][:2] == labels
    assert legend.get_title().get_text() == f"every group: {shared}"
    # the tag the prepared MLflow view groups the sweep's runs by, given as each child run is made
    plan = plan_sweep({**fixed, "lr": "0.001,0.003", "sigma": "0.5,2", "seed": "0,1"})
    assert sorted(set(short_labels(plan.groups)[0].values())) == labels


def test_the_per_sigma_table_says_how_each_sigmas_runs_stopped():
    def run(sigma, seed, stop=None, reason=""):
        config = RunConfig(sigma=sigma, seed=seed, patience=3, epochs=40)
        return record(config, 0.9, metrics={} if stop is None else {"stop_epoch": stop}, stop_reason=reason)

    older = run(2.0, 1)  # a run of an initmem that logged no stop reason
    report = build_report(
        [
            run(0.5, 0, 12, "patience"),
            run(0.5, 1, 17, "patience"),
            run(0.5, 2, 40, "epochs"),
            run(2.0, 0, 40, "epochs"),
            older,
        ]
    )
    assert [(row.sigma, row.stopped) for row in report.rows] == [
        (0.5, "epochs 1, patience 2 (epochs 12–40)"),
        (2.0, "epochs 1 (epoch 40)"),
    ]
    assert "| epochs 1, patience 2 (epochs 12–40) |" in to_markdown(report)
    assert "stopped" in to_csv(report).splitlines()[0].split(",")
    # records that carry no stop reason (exports written before it was logged): a dash, an empty CSV cell
    plain = build_report([run(0.5, 0), run(2.0, 0)])
    assert [row.stopped for row in plain.rows] == ["", ""]
    per_sigma = to_markdown(plain).split("## Per sigma")[1].strip().splitlines()
    assert per_sigma[2].endswith("| – |") and to_csv(plain).splitlines()[1].endswith(",")
