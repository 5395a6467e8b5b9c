"""``--until CLOCK=VALUE``: the fewest epochs whose final clock reaches the target, against clocks
written out by hand (constant, step and cosine schedules, warm-up, heavy-ball momentum, a smaller
last batch); the cap; the identity of a cell; sweeps and their dry-run plan against what runs;
resume."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core.config import MAX_EPOCHS, RunConfig, from_mapping, parse_until
from initmem_core.errors import ConfigError
from initmem_core.groups import group_label
from initmem_core.plugin_system.loader import get_registry
from initmem_core.sweep.grid import cell_names, plan_sweep, spec_from_toml
from initmem_core.tracking.tracker import MemoryTracker
from initmem_core.training.horizons import (
    Schedule,
    StepRule,
    epoch_batches,
    epochs_until,
    final_clocks,
)
from initmem_core.training.plan import plan_horizons, plan_run

runner = CliRunner(env={"COLUMNS": "200"})
CLOCKS = ("clock_sgd", "clock_l2", "clock_adapt")


# -- the arithmetic, against hand-written sums ----------------------------------------------------


def hand_multipliers(schedule: str, epochs: int, spe: int, warmup: int = 0, every: int = 1, gamma: float = 0.5):
    """Each step's factor on lr, written from the schedules' definitions (not from their code)."""
    total, out = epochs * spe, []
    for k in range(total):
        if schedule == "constant":
            m = 1.0
        elif schedule == "step":
            m = gamma ** ((k // spe) // every)
        else:
            p = min(1.0, max(0.0, (k - warmup) / (total - warmup))) if total > warmup else 1.0
            m = 0.5 * (1 + math.cos(math.pi * p))
        out.append(m * (k + 1) / warmup if k < warmup else m)
    return out


def hand_clocks(multipliers, lr, batches, momentum=0.0, shrink=0.0):
    steps = len(multipliers)
    sizes = (list(batches) * (steps // len(batches) + 1))[:steps]
    eta = [lr * m / (1 - momentum) for m in multipliers]
    return {
        "clock_sgd": sum(e * e / b for e, b in zip(eta, sizes)),
        "clock_l2": shrink * sum(eta),
        "clock_adapt": sum(eta),
    }


def hand_fewest(clock, target, schedule, batches, lr, momentum=0.0, shrink=0.0, warmup=0, **step):
    """The fewest epochs whose final clock reaches ``target``, by trying 1, 2, 3, ... by hand."""
    for epochs in range(1, 10_000):
        clocks = hand_clocks(
            hand_multipliers(schedule, epochs, len(batches), warmup, **step), lr, batches, momentum, shrink
        )
        if clocks[clock] >= target * (1 - 1e-9):
            return epochs, clocks
    raise AssertionError("not reached")


def test_the_issues_example_is_lambda_eta_steps():
    # digits' training split: 1079 examples, so 17 batches of b = 64 (the last of 55).
    batches = epoch_batches(1079, 64)
    assert batches == (64,) * 16 + (55,)
    rule = StepRule(lr=0.05, shrink=0.01)
    found = epochs_until(0.5, "clock_l2", Schedule("constant"), rule, batches).epochs
    steps = 0.5 / (0.01 * 0.05)  # T_L2 = lambda * eta * steps: 1000 steps
    assert found == math.ceil(steps / 17) == 59
    assert final_clocks(Schedule("constant"), rule, batches, found)["clock_l2"] == pytest.approx(0.01 * 0.05 * 59 * 17)
    assert final_clocks(Schedule("constant"), rule, batches, found - 1)["clock_l2"] < 0.5


@pytest.mark.parametrize("clock, target", [("clock_sgd", 0.004), ("clock_l2", 0.05), ("clock_adapt", 3.0)])
@pytest.mark.parametrize(
    "schedule, warmup_epochs, momentum",
    [
        ("constant", 0.0, 0.0),
        ("constant", 1.5, 0.9),
        ("step", 1.0, 0.5),
        ("step", 0.0, 0.0),
        ("cosine", 0.0, 0.0),
        ("cosine", 2.0, 0.9),
        ("cosine", 0.5, 0.5),
    ],
)
def test_fewest_epochs_match_hand_computed_clocks(clock, target, schedule, warmup_epochs, momentum):
    batches = epoch_batches(70, 24)  # 24, 24, 22
    lr, shrink = 0.02, 0.01
    warmup = round(warmup_epochs * 3)
    expected, clocks = hand_fewest(clock, target, schedule, batches, lr, momentum, shrink, warmup, every=2, gamma=0.99)
    sched = Schedule(schedule, epochs=1, warmup_epochs=warmup_epochs, lr_step_epochs=2, lr_gamma=0.99)
    rule = StepRule(lr=lr, momentum=momentum, shrink=shrink)
    assert epochs_until(target, clock, sched, rule, batches).epochs == expected
    assert final_clocks(sched, rule, batches, expected) == pytest.approx(clocks, rel=1e-9)


def test_a_target_landing_on_an_epoch_boundary_needs_no_extra_epoch():
    # 0.1 ten times is 0.9999999999999999 in floating point: one rounding short is reached.
    rule, batches = StepRule(lr=0.1), epoch_batches(100, 10)
    assert final_clocks(Schedule("constant"), rule, batches, 1)["clock_adapt"] < 1.0
    assert epochs_until(1.0, "clock_adapt", Schedule("constant"), rule, batches).epochs == 1


def test_a_step_schedule_that_decays_has_a_ceiling():
    # gamma 0.5 every epoch: T_adapt tends to 2 * (one epoch at lr) = 2 * 0.1 * 10 = 2.
    rule, batches = StepRule(lr=0.1), epoch_batches(100, 10)
    sched = Schedule("step", lr_step_epochs=1, lr_gamma=0.5)
    assert epochs_until(1.9, "clock_adapt", sched, rule, batches).epochs == 5  # 2 - 2 / 2**5 >= 1.9
    found = epochs_until(2.5, "clock_adapt", sched, rule, batches)
    assert found.epochs is None and found.bounded and found.limit_value == pytest.approx(2.0)


# -- a run's horizon: the cap and the messages --------------------------------------------------


def config_of(**values) -> RunConfig:
    return plan_run(from_mapping(values), get_registry()).config


def test_the_cap_too_short_names_the_clock_reached_and_the_epochs_needed():
    values = dict(opt="sgd", lr=0.05, l2=0.01, until="clock_l2=0.5")  # digits: 1079 examples, 17 batches
    with pytest.raises(ConfigError) as error:
        plan_run(from_mapping({**values, "epochs": 40}), get_registry())  # the plan finds the epochs
    message = str(error.value)
    assert "\n" not in message
    assert f"reach only clock_l2={0.01 * 0.05 * 40 * 17:.4g}" in message
    assert "needs 59 epochs; raise --epochs to at least 59" in message
    plan = plan_run(from_mapping({**values, "epochs": 59}), get_registry())
    assert (plan.trains.epochs, plan.config.epochs, plan.n_train) == (59, 59, 1079)


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(until="clock_l2=1", l2=0.0), "stays 0 in this run; set --l2 or --weight-decay above 0"),
        (
            dict(until="clock_adapt=50", schedule="step", lr_step_epochs=1, lr_gamma=0.1),
            "cannot reach 50 under this run's settings: it tends to",
        ),
    ],
)
def test_a_clock_that_cannot_reach_the_target_is_one_line(values, message):
    with pytest.raises(ConfigError, match=message):
        plan_run(from_mapping({"opt": "sgd", **values}), get_registry())


def test_momentum_and_every_shrinking_force_enter_the_declared_rule():
    registry = get_registry()
    sgd = plan_run(config_of(opt="sgd", lr=0.01, momentum=0.9, l2=0.01, weight_decay=1e-3), registry).rule
    assert sgd.eta(1.0) == pytest.approx(0.1) and sgd.shrink == pytest.approx(0.011)
    damped = plan_run(config_of(opt="sgd", lr=0.01, momentum=0.5, opt_arg=("dampening=0.5",)), registry).rule
    assert damped.eta(1.0) == pytest.approx(0.01)
    adam = plan_run(config_of(opt="adam", momentum=0.0, weight_decay=0.05), registry).rule  # its beta1 averages
    assert adam.eta(1.0) == pytest.approx(1e-3) and adam.convention == "lr"


# -- the config knob: format, identity, sweeps ----------------------------------------------------


def test_until_is_spelt_one_way_and_bad_values_are_one_line():
    assert parse_until("") is None and parse_until(" clock_l2 = 2 ") == ("clock_l2", 2.0)
    assert (
        from_mapping({"until": "clock_l2=2"}).until == from_mapping({"until": "clock_l2=2.0"}).until == "clock_l2=2.0"
    )
    for bad, says in [
        ("l2=2", "CLOCK one of clock_adapt, clock_l2, clock_sgd"),
        ("clock_l=2", "(did you mean 'clock_l2'?)"),
        ("clock_l2", "CLOCK=VALUE"),
        ("clock_l2=0", "greater than 0"),
        ("clock_l2=nan", "greater than 0"),
    ]:
        with pytest.raises(ConfigError, match=says):
            from_mapping({"until": bad})


def test_the_target_is_the_identity_and_the_cap_is_not():
    plain = RunConfig()
    # A default config hashes as it did before the knob existed (finished cells stay found).
    assert plain.config_hash() == RunConfig(until="").config_hash()
    targeted = from_mapping({"until": "clock_l2=1", "l2": 0.01})
    assert targeted.epochs == MAX_EPOCHS  # no --epochs given: no cap
    assert targeted.config_hash() == targeted.replace(epochs=80).config_hash()
    assert targeted.config_hash() != targeted.replace(until="clock_l2=2").config_hash()
    assert targeted.config_hash() != targeted.replace(until="").config_hash()
    assert group_label(targeted) == "opt=sgd,until=clock_l2=1.0,l2=0.01"  # no epochs=999999


def test_a_checkpoint_written_before_the_knob_existed_still_resumes():
    from initmem_core.training.resume import config_differences

    before = {key: value for key, value in RunConfig().to_dict().items() if key != "until"}
    assert config_differences(before, RunConfig()) == []
    assert config_differences(before, RunConfig(until="clock_l2=1.0")) == ["until ('' -> 'clock_l2=1.0')"]


def test_a_sweep_file_trains_every_group_to_one_clock(tmp_path):
    path = tmp_path / "clocks.toml"
    path.write_text(
        '[base]\ndata = "digits"\nepochs = 400\nuntil = "clock_l2=0.5"\n[grid]\nsigma = [0.5, 1.0]\n'
        "[[groups]]\nl2 = 0.01\nlr = 0.05\n[[groups]]\nl2 = 0.02\nlr = 0.05\n"
        '[[groups]]\nl2 = 0.01\nlr = 0.05\nuntil = ""\nepochs = 5\n'
    )
    plan = plan_sweep(spec_from_toml(path), registry=get_registry())
    assert len(plan.cells) == 6 and len(set(plan.groups)) == 3
    assert {c.until for c in plan.cells} == {"clock_l2=0.5", ""}
    horizons = plan_horizons(plan.plans)
    # 1079 digits, 17 steps an epoch: T_L2 = lambda * 0.05 * 17 * epochs
    assert [h.epochs for h in horizons] == [59, 59, 30, 30, 5, 5]
    assert [h.clocks["clock_l2"] for h in horizons] == pytest.approx(
        [0.01 * 0.05 * 17 * 59] * 2 + [0.02 * 0.05 * 17 * 30] * 2 + [0.01 * 0.05 * 17 * 5] * 2
    )
    # The command line's list of targets: one group per target, named by it.
    listed = plan_sweep({"until": "clock_l2=0.5,clock_l2=1", "l2": 0.01, "sigma": "0.5,1"}, registry=get_registry())
    assert len(set(listed.groups)) == 2 and "clock_l2=1.0" in listed.names[2]
    assert cell_names(listed.cells, ["until"])[0] == "resnet20-sgd-clock_l2=0.5-s0.5-seed0"


def test_a_sweep_whose_cap_is_too_short_fails_before_anything_is_tracked(tmp_path):
    uri = f"sqlite:///{tmp_path / 'never.db'}"
    with pytest.raises(ConfigError, match=r"needs 59 epochs.*\(in the cell sigma=0.5\)"):
        initmem_core.run_sweep(
            {"until": "clock_l2=0.5", "l2": 0.01, "lr": 0.05, "epochs": 10, "sigma": "0.5,1"}, tracking_uri=uri
        )
    assert not (tmp_path / "never.db").exists()


def test_dry_run_prints_each_cells_epochs_and_final_clocks():
    result = runner.invoke(
        app,
        ["sweep", "--until", "clock_l2=0.5,clock_l2=1", "--l2", "0.01", "--lr", "0.05", "--sigma", "0.5", "--dry-run"],
    )
    assert result.exit_code == 0, result.output
    assert "epochs run" in result.output and "T_L2" in result.output
    groups = [line for line in result.output.splitlines() if "clock_l2=" in line and "opt=sgd" in line]
    assert "until=clock_l2=0.5" in groups[0] and "until=clock_l2=1.0" in groups[1]
    cells = [line.split() for line in result.output.splitlines() if "0.5" in line and "clock" not in line]
    cells = [[v for v in row if v not in "│┃"] for row in cells if row[0] == "│"]
    assert cells[0][:5] == ["1", "1", "0.5", "0", "59"] and f"{0.01 * 0.05 * 17 * 59:.4g}" in cells[0]
    assert cells[1][:5] == ["2", "2", "0.5", "0", "118"] and f"{0.01 * 0.05 * 17 * 118:.4g}" in cells[1]
    assert "2 to run; estimated work of those to run: 3,009 optimizer steps" in result.output
    short = runner.invoke(app, ["sweep", "--until", "clock_l2=0.5", "--l2", "0.01", "--epochs", "20", "--dry-run"])
    assert short.exit_code == 2 and "raise --epochs to at least 59" in short.output


def test_run_with_a_cap_too_short_fails_in_one_line_before_training():
    result = runner.invoke(
        app,
        [
            "run",
            "--opt",
            "sgd",
            "--lr",
            "0.05",
            "--l2",
            "0.01",
            "--until",
            "clock_l2=0.5",
            "--epochs",
            "58",
            "--no-tracking",
        ],
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: --until clock_l2=0.5: 58 epochs (--epochs, the cap) reach only clock_l2={0.01 * 0.05 * 17 * 58:.4g}; "
        "it needs 59 epochs; raise --epochs to at least 59"
    ]


# -- what runs is what was planned ----------------------------------------------------------------

TINY = dict(
    data="synthetic:1x8x8-c4-n70", arch="resnet20", batch_size=24, threads=1, checkpoint_every=0, eval_batch_size=512
)


@pytest.mark.parametrize(
    "values",
    [
        dict(opt="sgd", lr=0.02, momentum=0.9, l2=0.01, schedule="cosine", warmup_epochs=1.5, until="clock_l2=0.05"),
        dict(
            opt="sgd", lr=0.05, momentum=0.5, schedule="step", lr_step_epochs=2, lr_gamma=0.7, until="clock_sgd=0.003"
        ),
        dict(opt="adamw", weight_decay=0.05, schedule="cosine", until="clock_adapt=0.02"),
    ],
)
def test_a_run_trains_the_planned_epochs_and_ends_on_the_planned_clocks(values):
    config = config_of(**TINY, epochs=200, **values)
    [planned] = plan_horizons([plan_run(config, get_registry())])
    tracker = MemoryTracker()
    result = initmem_core.run(config, tracker=tracker)
    assert len(result.history) - 1 == planned.epochs == int(tracker.params["resolved_epochs"])
    last = result.history[-1]
    assert {c: last[c] for c in CLOCKS} == planned.clocks  # bit for bit: the same sums in the same order
    clock, target = parse_until(config.until)
    assert last[clock] >= target * (1 - 1e-9)
    shorter = final_clocks(
        Schedule.of(config), plan_run(config, get_registry()).rule, epoch_batches(70, 24), planned.epochs - 1
    )
    assert shorter[clock] < target * (1 - 1e-9)
    assert tracker.params["until"] == config.until and tracker.params["epochs"] == 200  # the cap, as given


@pytest.mark.slow(seconds=8)  # 102 steps of ResNet-20 on digits through the CLI
def test_initmem_run_until_trains_the_fewest_epochs_that_reach_the_target(tmp_path):
    result = runner.invoke(
        app,
        [
            "run",
            "--opt",
            "sgd",
            "--lr",
            "0.05",
            "--l2",
            "0.1",
            "--until",
            "clock_l2=0.5",
            "--no-tracking",
            "--threads",
            "1",
            "--eval-size",
            "64",
            "--train-eval-size",
            "64",
        ],
    )
    assert result.exit_code == 0, result.output
    final = float(next(line for line in result.output.splitlines() if "final clock_l2" in line).split()[-2])
    assert final == pytest.approx(0.1 * 0.05 * 17 * 6, rel=1e-3)  # 6 epochs of 17 steps: 5 reach only 0.425


@pytest.mark.slow  # a run stopped by a signal, then resumed from its checkpoint
def test_a_run_whose_epochs_came_from_until_resumes_with_the_same_epochs(tracking_uri, tmp_path):
    from initmem_core.training.stop_signals import Stopped
    from tests.support.signal_progress import SignalAtStep

    values = dict(
        TINY,
        opt="sgd",
        lr=0.05,
        momentum=0.5,
        l2=0.01,
        schedule="cosine",
        until="clock_l2=0.02",
        checkpoint_every=1,
        seed=1,
    )
    reference = initmem_core.run(tracking=False, checkpoint_dir=str(tmp_path / "reference"), **values)
    epochs = len(reference.history) - 1
    assert epochs > 3
    with pytest.raises(Stopped):
        initmem_core.run(tracking_uri=tracking_uri, progress=SignalAtStep(2 * 3 + 1), **values)
    resumed = initmem_core.run(tracking_uri=tracking_uri, resume=True, **values)
    assert len(resumed.history) - 1 == epochs
    assert resumed.history == reference.history  # the same schedule: a cosine over the same epochs


@pytest.mark.parametrize(
    "values", [dict(opt="muon", until="clock_adapt=0.1"), dict(opt="timm:lion", until="clock_adapt=0.002")]
)
def test_optimizers_whose_momentum_is_an_average_are_planned_as_they_are_built(values):
    config = config_of(**TINY, **values)
    [planned] = plan_horizons([plan_run(config, get_registry())])
    result = initmem_core.run(config, tracking=False)
    assert len(result.history) - 1 == planned.epochs
    assert {c: result.history[-1][c] for c in CLOCKS} == planned.clocks


def test_a_timm_family_declares_each_optimizers_own_convention():
    # timm's AdamW averages its momentum (eta = lr): the timm:* family now declares that per variant.
    config = config_of(**TINY, opt="timm:adamw", momentum=0.9, until="clock_adapt=0.01")
    [planned] = plan_horizons([plan_run(config, get_registry())])
    result = initmem_core.run(config, tracking=False)
    assert len(result.history) - 1 == planned.epochs
