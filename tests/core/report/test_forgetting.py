"""Memory over training and forgetting times (report/forgetting.py): crossings by hand, a memory
that never falls to half, synthetic sweeps with a known half-life in T_L2, where users read them
(JSON, CSV, Markdown, parent step metrics, plots) and the finding "forgetting follows the clocks"."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from initmem_core.report.claim_groups import mechanism_clock, read_sweep
from initmem_core.report.forgetting import at_epoch, first_crossing, group_forgetting, radial_by_seed
from initmem_core.report.memory import build_report
from initmem_core.report.render import forgetting_csv, to_json, to_markdown
from initmem_core.report.verdicts import CANNOT_DECIDE, CONTRADICTED, REPRODUCED
from initmem_core.tracking.records import CellRecord
from initmem_core.vocabulary import ADAPTIVE_FAMILY, SGD_FAMILY
from initmem_plugins.claims import forgetting_sweeps
from tests.support.builders import claim
from tests.support.builders import findings as evaluate_findings
from tests.support.builders import record as cell_record

forgetting_follows_the_clocks = claim("forgetting_follows_the_clocks")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# -- crossings by hand ----------------------------------------------------------------------


def test_the_crossing_is_interpolated_between_the_two_epochs_that_bracket_it():
    # 0.8 at epoch 1, 0.4 at epoch 2: half of 1.0 is reached 3/4 of the way, at epoch 1.75
    assert first_crossing([0, 1, 2, 3], [1.0, 0.8, 0.4, 0.2], 0.5) == pytest.approx(1.75)
    # a missing evaluation is skipped: the bracket is then epochs 1 and 3
    assert first_crossing([0, 1, 2, 3], [1.0, 0.8, math.nan, 0.4], 0.5) == pytest.approx(2.5)
    # the first crossing counts, not a later one after a rebound
    assert first_crossing([0, 1, 2, 3], [1.0, 0.5, 0.9, 0.1], 0.5) == pytest.approx(1.0)
    assert first_crossing([0, 1, 2], [1.0, 0.9, 0.6], 0.5) is None
    # from a later start (accuracy memory starts at epoch 1), a band already below crosses there
    assert first_crossing([0, 1, 2], [0.0, 0.3, 0.1], 0.5, start=1) == 1
    # clocks are read at the same fractional epoch, linearly
    assert at_epoch(1.75, [0, 1, 2], [0.0, 0.1, 0.3]) == pytest.approx(0.25)


def cells_from(
    norms_by_sigma: dict[float, list[float]],
    seed: int = 0,
    clock_l2=(0.0, 0.1, 0.3, 0.6),
    cosines=(1.0, 0.9, 0.7, 0.6),
    **config,
) -> list[CellRecord]:
    out = []
    for sigma, norms in norms_by_sigma.items():
        histories = {
            "weight_norm": list(enumerate(norms)),
            "init_cosine": list(enumerate(cosines)),
            "clock_l2": list(enumerate(clock_l2)),
            "clock_sgd": [(e, 0.0) for e in range(len(norms))],
            "clock_adapt": [(e, 10 * e) for e in range(len(norms))],
        }
        out.append(
            cell_record(
                {"opt": "sgd", "l2": 0.01, "sigma": sigma, "seed": seed, **config},
                metrics={"weight_norm": norms[-1]},
                histories=histories,
            )
        )
    return out


def test_radial_memory_is_the_slope_of_log_norm_on_log_sigma_and_its_half_life_is_interpolated():
    # ||W|| = 10 * sigma^m with m = 1, 0.8, 0.4, 0.2 at epochs 0..3
    slopes = (1.0, 0.8, 0.4, 0.2)
    cells = cells_from({s: [10 * s**m for m in slopes] for s in (0.5, 1.0, 2.0)})
    assert radial_by_seed(cells, [0, 1, 2, 3])[0] == pytest.approx(list(slopes))
    found = group_forgetting("g", cells, accuracy=False)
    half = found.half_lives["radial"]
    assert half.reached and half.initial == pytest.approx(1.0) and half.seeds == 1
    assert half.epoch == pytest.approx(1.75)
    assert half.clock_l2 == pytest.approx(0.1 + 0.75 * 0.2)  # T_L2 read at epoch 1.75
    assert half.clock_adapt == pytest.approx(17.5)
    assert math.isnan(half.clock_sgd)  # a clock that never moved gives no half-life
    assert math.isnan(half.epoch_lo) and "one seed" in half.note
    # directional: mean cosine 1, 0.9, 0.7, 0.6 never reaches 0.5 within epoch 3
    assert not found.half_lives["directional"].reached


def test_a_memory_that_never_falls_to_half_says_so_with_the_clocks_reached():
    cells = [
        c
        for seed in (0, 1, 2)
        for c in cells_from({s: [10 * s**m for m in (1.0, 0.9, 0.8, 0.7)] for s in (0.5, 2.0)}, seed=seed)
    ]
    found = group_forgetting("opt=sgd,l2=0.01", cells, accuracy=False)
    half = found.half_lives["radial"]
    assert not half.reached and half.never == 3 and half.seeds == 0 and math.isnan(half.epoch)
    assert (half.horizon_epoch, half.horizon_clock_l2, half.horizon_clock_adapt) == (3, pytest.approx(0.6), 30)
    report = build_report(cells)
    markdown = to_markdown(report)
    assert "## Forgetting times" in markdown
    assert (
        "| sgd | radial | 1 (epoch 0) | not within the horizon (epoch 3: T_SGD 0, T_L2 0.6, T_adapt 30) |" in markdown
    )
    # one seed of three crosses: no estimate (the crossing seeds alone would bias it down), and why
    cells = [
        c
        for seed in (0, 1)
        for c in cells_from({s: [10 * s**m for m in (1.0, 0.9, 0.8, 0.7)] for s in (0.5, 2.0)}, seed=seed)
    ]
    cells += cells_from({s: [10 * s**m for m in (1.0, 0.6, 0.4, 0.2)] for s in (0.5, 2.0)}, seed=2)
    half = group_forgetting("g", cells, accuracy=False).half_lives["radial"]
    assert not half.reached and (half.seeds, half.never) == (1, 2) and math.isnan(half.epoch)
    assert half.note.startswith("2 of 3 seeds did not fall to half within the horizon")


def test_accuracy_memory_counts_from_its_peak_and_its_band_gives_the_interval():
    from initmem_core.report.forgetting import MemoryPoint, accuracy_half_life

    epochs = [0, 1, 2, 3, 4]
    clocks = {"clock_sgd": [0.0] * 5, "clock_l2": [0.1 * e for e in epochs], "clock_adapt": [float(e) for e in epochs]}
    spreads = [0.0, 2.0, 10.0, 6.0, 4.0]  # forms while the nets learn, peaks at epoch 2, then fades
    points = [MemoryPoint(e, v, v - 1, v + 1, 4, 0.0, 0.1 * e, float(e)) for e, v in zip(epochs, spreads)]
    half = accuracy_half_life(points, epochs, clocks)
    assert half.reached and (half.initial, half.reference_epoch) == (10.0, 2)
    assert half.value("epoch") == pytest.approx((3.5, 3.0, 4.0))  # 6 -> 4 crosses 5 half-way; bands 5 at 3, at 4
    assert half.value("clock_l2") == pytest.approx((0.35, 0.3, 0.4))
    # a spread still growing at the last epoch has not begun to be forgotten
    rising = [MemoryPoint(e, v, v - 1, v + 1, 4, 0.0, 0.1 * e, float(e)) for e, v in zip(epochs, [0, 1, 2, 3, 4.0])]
    half = accuracy_half_life(rising, epochs, clocks)
    assert not half.reached and half.note == "not within the horizon (its peak is the last epoch: still forming)"


# -- synthetic sweeps with a known half-life ------------------------------------------------


@pytest.mark.slow  # simulates sweeps with a known half-life
def test_a_known_half_life_in_t_l2_is_recovered_and_covered():
    report = build_report(forgetting_sweeps.synthetic_sweep(3))
    assert len(report.forgetting) == len(forgetting_sweeps.GROUPS)
    epochs = []
    for found in report.forgetting.values():
        half = found.half_lives["radial"]
        estimate, low, high = half.value("clock_l2")
        assert estimate == pytest.approx(forgetting_sweeps.HALF_LIFE, rel=0.10)
        assert low <= forgetting_sweeps.HALF_LIFE <= high
        epochs.append(half.epoch)
        # every memory of the report has a curve against the epoch and the clocks
        assert {"radial", "directional", "accuracy"} <= set(found.curves)
        assert found.curves["radial"][0].epoch == 0 and found.curves["radial"][0].value == pytest.approx(1.0)
    # in epochs the groups disagree: lambda * lr differs by 2 between them
    assert max(epochs) / min(epochs) > 1.6


@pytest.mark.slow  # 60 simulated sweeps; benchmarks/forgetting_times.py measures 200 (docs/STATISTICS.md)
def test_the_interval_covers_a_known_half_life_in_most_simulated_sweeps():
    result = forgetting_sweeps.measure(60)
    assert result["within_10pct"] >= 0.85 and result["coverage"] >= 0.85, result


# -- where users read it --------------------------------------------------------------------


@pytest.fixture(scope="module")
def report():
    return build_report(forgetting_sweeps.synthetic_sweep(0, epochs=30))


def test_json_csv_and_markdown_carry_every_groups_half_lives(report):
    data = json.loads(to_json(report))
    assert set(data["forgetting"]) == {g.group for g in report.groups}
    for group, found in data["forgetting"].items():
        for memory in ("radial", "directional", "accuracy"):
            half = found["half_lives"][memory]
            ours = report.forgetting[group].half_lives[memory]
            assert half["reached"] is True and half["epoch"] == pytest.approx(ours.epoch)
            assert half["clock_l2"] == pytest.approx(ours.clock_l2) and half["clock_l2_lo"] < half["clock_l2"]
        assert found["curves"]["radial"][0]["epoch"] == 0 and len(found["curves"]["radial"]) == 31
    rows = list(csv.DictReader(io.StringIO(forgetting_csv(report.forgetting))))
    assert len(rows) == 3 * len(report.groups)
    radial = {r["group"]: float(r["clock_l2"]) for r in rows if r["memory"] == "radial"}
    assert radial == pytest.approx({g: f.half_lives["radial"].clock_l2 for g, f in report.forgetting.items()})
    assert "| radial half-life |" not in to_markdown(report)  # that column is the parent description's
    assert "half-life epochs [95% CI]" in to_markdown(report)


def test_parent_metrics_carry_the_curves_by_epoch_and_the_half_lives(report):
    from initmem_core.groups import metric_suffix

    steps = report.parent_step_metrics()
    group = report.groups[0].group
    suffix = metric_suffix(group)
    radial = sorted((epoch, value) for name, value, epoch in steps if name == f"radial_memory_{suffix}")
    assert [epoch for epoch, _ in radial] == list(range(31))
    assert [v for _, v in radial] == pytest.approx([p.value for p in report.forgetting[group].curves["radial"]])
    assert {name.split("_memory_")[0] for name, _, _ in steps} == {"radial", "directional", "accuracy"}
    scalars = report.parent_metrics()
    assert scalars[f"half_life_radial_clock_l2_{suffix}"] == pytest.approx(
        report.forgetting[group].half_lives["radial"].clock_l2
    )
    assert f"half_life_accuracy_epoch_{suffix}" in scalars


def test_the_parent_description_names_each_groups_radial_half_life(report):
    from initmem_core.report.description import description

    note = description(report, "s", "1", "abc", "key")
    assert "| radial half-life |" in note and "memory_vs_clock.png" in note
    half = report.forgetting[report.groups[0].group].half_lives["radial"]
    assert f"{half.epoch:.3g} [{half.epoch_lo:.3g}, {half.epoch_hi:.3g}] ep · T_SGD" in note


@pytest.mark.slow  # draws every memory figure
def test_memory_plots_are_valid_pngs(tmp_path):
    from matplotlib import image

    from initmem_plugins.figures.plots import memory_vs_clock, memory_vs_epoch

    report = build_report(forgetting_sweeps.synthetic_sweep(0, groups=forgetting_sweeps.GROUPS[:2], epochs=10))
    for draw in (memory_vs_epoch, memory_vs_clock):
        path = draw(report, tmp_path / f"{draw.__name__}.png")
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        height, width, _ = image.imread(path).shape
        assert height > 300 and width > 600


def test_memory_curves_with_nothing_to_draw_get_the_caption_not_an_empty_legend(monkeypatch, tmp_path):
    import dataclasses
    import warnings

    from initmem_plugins.figures import plots

    report = build_report(forgetting_sweeps.synthetic_sweep(0, groups=forgetting_sweeps.GROUPS[:1], epochs=3))
    for found in report.forgetting.values():  # as when every run of a group failed before its first epoch
        for memory, points in found.curves.items():
            found.curves[memory] = [dataclasses.replace(p, value=math.nan) for p in points]
    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda figure, path: drawn.append(figure) or path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns of a legend with no entries
        plots.memory_vs_epoch(report, tmp_path / "memory.png")
    assert not drawn[0].legends


# -- the finding ----------------------------------------------------------------------------


def test_mechanism_clocks():
    from initmem_core.config import RunConfig

    assert mechanism_clock(RunConfig(opt="sgd"), SGD_FAMILY) == "clock_sgd"
    assert mechanism_clock(RunConfig(opt="sgd", l2=0.01), SGD_FAMILY) == "clock_l2"
    assert mechanism_clock(RunConfig(opt="sgd", weight_decay=0.01), SGD_FAMILY) == "clock_l2"
    assert mechanism_clock(RunConfig(opt="adamw", weight_decay=0.01), ADAPTIVE_FAMILY) == "clock_adapt"


@pytest.mark.slow  # simulates sweeps with a known half-life
def test_forgetting_follows_the_clocks_when_half_lives_agree_in_t_l2():
    finding = next(
        f for f in evaluate_findings(forgetting_sweeps.synthetic_sweep(1)) if f.claim.startswith("Forgetting follows")
    )
    assert finding.verdict == REPRODUCED, finding.measured
    assert "T_L2 family [lr=0.05,l2=0.01, lr=0.05,l2=0.02, lr=0.1,l2=0.01]" in finding.measured


@pytest.mark.slow  # simulates sweeps with a known half-life
def test_forgetting_that_follows_the_epochs_contradicts_it():
    # the same groups, each forgetting with a half-life of 12 epochs whatever its lambda and lr
    finding = forgetting_follows_the_clocks(read_sweep(forgetting_sweeps.synthetic_sweep(1, in_epochs=12.0)))
    assert finding.verdict == CONTRADICTED, finding.measured


def test_with_two_seeds_it_cannot_be_decided():
    finding = forgetting_follows_the_clocks(read_sweep(forgetting_sweeps.synthetic_sweep(1, seeds=2)))
    assert finding.verdict == CANNOT_DECIDE, finding.measured


def test_a_family_whose_memory_never_halves_is_left_out_and_named():
    import dataclasses

    import numpy as np

    records = forgetting_sweeps.without_accuracy(forgetting_sweeps.synthetic_sweep(1))
    rng = np.random.default_rng(5)
    for batch_size in (32, 128):  # plain SGD (T_SGD) whose radial memory halves only after 400 epochs
        for record in forgetting_sweeps.group_records(0.0, 0.05, rng, in_epochs=400.0):
            record.config = dataclasses.replace(record.config, batch_size=batch_size)
            records.append(record)
    finding = forgetting_follows_the_clocks(read_sweep(forgetting_sweeps.without_accuracy(records)))
    assert finding.verdict == REPRODUCED, finding.measured  # decided by the T_L2 family alone
    assert (
        "T_SGD family [lr=0.05,b=128, lr=0.05,b=32]: left out (no radial half-life within the horizon in"
    ) in finding.measured
    # without the family that decides, nothing is resolved
    alone = forgetting_follows_the_clocks(read_sweep([r for r in records if r.config.l2 == 0]))
    assert alone.verdict == "not resolved at this scale" and "left out" in alone.measured
