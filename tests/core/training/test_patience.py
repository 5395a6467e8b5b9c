"""``--patience N``: early stopping on the run's own selection criterion (its best validation loss),
capped by ``--epochs`` and, with ``--until``, not before the target; where and why a run stopped;
a stopped or killed run resumed stops where it would have; the cell's identity; the dry run."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core.config import MAX_EPOCHS, RunConfig, from_mapping
from initmem_core.plugin_system.loader import get_registry
from initmem_core.tracking.tracker import MemoryTracker
from initmem_core.training.plan import plan_horizons, plan_run
from initmem_core.training.selection import stopping
from tests.support.cli_processes import cli_args, history, mlflow_client, only_run
from tests.support.signal_progress import SignalAtStep

runner = CliRunner(env={"COLUMNS": "200"})

# 4 steps an epoch at a high rate: the validation loss bottoms out within some 15 epochs.
CONFIG = dict(train_size=128, batch_size=32, lr=0.4, threads=1, eval_batch_size=512, patience=3, epochs=200)
STEPS_PER_EPOCH = 4
SUMMARY = ("stop_epoch", "best_val_epoch", "best_val_loss", "best_val_test_acc", "final_test_acc")


def rows(losses: list[float], every: int = 1) -> list[dict[str, float]]:
    """A history of evaluation points 0, every, 2 every... with these validation losses."""
    return [{"epoch": i * every, "val_loss": loss} for i, loss in enumerate(losses)]


def reasons(config: RunConfig, losses: list[float], min_epochs: int = 0, every: int = 1) -> list[str | None]:
    """``stopping`` at each evaluation point of a run that went on regardless."""
    history = rows(losses, every)
    return [stopping(config, min_epochs, history[: i + 1]) for i in range(len(history))]


# -- the rule ---------------------------------------------------------------------------------


def test_patience_counts_evaluations_since_the_best_validation_loss():
    config = RunConfig(patience=3, epochs=20)
    # best at epoch 2; epochs 3, 4 and 5 do not improve on it (a tie does not either)
    assert reasons(config, [9.0, 2.0, 1.0, 1.5, 1.0, 1.2]) == [None] * 5 + ["patience"]
    # an improvement starts the count again
    assert reasons(config, [9.0, 2.0, 1.0, 1.5, 0.5, 1.2, 1.3, 1.4]) == [None] * 7 + ["patience"]
    # never stale for 3 evaluations: the cap ends it
    assert reasons(RunConfig(patience=3, epochs=5), [9.0, 5.0, 4.0, 3.0, 2.0, 1.0])[-1] == "epochs"
    # off: only the cap
    assert reasons(RunConfig(epochs=5), [9.0, 1.0, 2.0, 3.0, 4.0, 5.0]) == [None] * 5 + ["epochs"]
    # the initialization (epoch 0) is no checkpoint: no stop at it however high patience is set
    assert stopping(RunConfig(patience=1, epochs=5), 0, rows([1.0])) is None


def test_with_eval_every_patience_counts_evaluation_points_not_epochs():
    config = RunConfig(patience=2, epochs=40, eval_every=5)
    # points at epochs 0, 5, 10, 15, 20: best at 10, then 15 and 20 are two points without improvement
    assert reasons(config, [9.0, 2.0, 1.0, 1.1, 1.2], every=5) == [None] * 4 + ["patience"]


def test_with_until_the_run_goes_on_to_the_target_and_names_what_held_last():
    config = RunConfig(patience=2, epochs=30, until="clock_adapt=1")
    losses = [9.0, 2.0, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5]  # patience runs out at epoch 4
    # the target at epoch 6: it held last
    assert reasons(config, losses, min_epochs=6) == [None] * 6 + ["until", "until"]
    # the target at epoch 3: patience held last
    assert reasons(config, losses, min_epochs=3)[:5] == [None] * 4 + ["patience"]
    # --until alone ends at its epochs, which the plan set as the config's
    assert reasons(RunConfig(until="clock_adapt=1", epochs=3), [9.0, 1.0, 2.0, 3.0]) == [None] * 3 + ["until"]


# -- the config and the plan ------------------------------------------------------------------------


def test_the_hash_is_unchanged_when_off_and_changes_when_set():
    # The hashes of these configs before the knob existed: sweep cells resume by them.
    assert RunConfig().config_hash() == RunConfig(patience=0).config_hash() == "ea0db52dc4cf70bf"
    assert RunConfig(patience=3).config_hash() != RunConfig().config_hash()
    assert RunConfig(patience=3).config_hash() != RunConfig(patience=4).config_hash()
    # with --until the cap is no part of a cell without patience, and is with it (the run may reach it)
    until = RunConfig(until="clock_adapt=2.0")
    assert until.config_hash() == until.replace(epochs=99).config_hash()
    assert until.replace(patience=3).config_hash() != until.replace(patience=3, epochs=99).config_hash()


def test_with_patience_epochs_stays_the_cap_even_with_until():
    assert from_mapping({"until": "clock_adapt=2"}).epochs == MAX_EPOCHS  # no cap
    assert from_mapping({"until": "clock_adapt=2", "patience": "3"}).epochs == 30  # the default cap
    assert from_mapping({"until": "clock_adapt=2", "patience": 3, "epochs": 80}).epochs == 80


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_the_plan_trains_to_the_cap_and_stops_no_earlier_than_the_target(schedule):
    registry = get_registry()
    values = dict(CONFIG, until="clock_adapt=8", schedule=schedule, epochs=40)
    fixed = plan_run(from_mapping({k: v for k, v in values.items() if k != "patience"}), registry)
    adaptive = plan_run(from_mapping(values), registry)
    assert adaptive.trains.epochs == 40 and adaptive.trains.schedule == schedule  # the cap: its schedule spans it
    # each epoch adds lr x 4 steps x its rate multiplier (at most 1) to T_adapt: 8 needs at least 5 epochs
    assert 5 <= adaptive.min_epochs <= fixed.trains.epochs
    if schedule == "constant":  # a step's rate does not depend on the run's length
        assert adaptive.min_epochs == fixed.trains.epochs == 5
    assert fixed.min_epochs == 0 and plan_run(from_mapping(CONFIG), registry).min_epochs == 0
    # the dry run's horizon: the cap, with the clocks it ends on
    (horizon,) = plan_horizons([adaptive])
    assert (horizon.epochs, horizon.min_epochs) == (40, adaptive.min_epochs)
    assert horizon.clocks["clock_adapt"] > 8


def test_negative_patience_is_one_line_and_exit_2(tmp_path):
    result = runner.invoke(app, ["run", "--patience", "-1", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == "Error: --patience must be 0 or greater, got -1"
    assert list(tmp_path.iterdir()) == []  # nothing tracked


def test_the_dry_run_gives_the_cap_and_says_the_horizon_is_adaptive():
    args = ["sweep", "--dry-run", "--sigma", "0.5,2", "--seed", "0", *cli_args(dict(CONFIG, epochs=60))]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert text.count("≤60") == 2  # each cell's epochs: at most the cap
    assert "adaptive horizon: 2 of 2 cells stop early" in text and "at most 60 epochs (--epochs, the cap)" in text
    assert "time above are for the cap: an upper bound" in text
    document = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert [(c["epochs"], c["adaptive"]) for c in document["cells"]] == [(60, True), (60, True)]
    assert document["estimate"]["upper_bound"] is True
    plain = runner.invoke(app, ["sweep", "--dry-run", "--sigma", "0.5", "--epochs", "60", "--train-size", "128"])
    assert "adaptive" not in plain.output and "≤" not in plain.output


# -- real runs ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted patience run: its result and the tags it ended with."""
    tracker, folder = MemoryTracker(), tmp_path_factory.mktemp("ref")
    result = initmem_core.run(tracker=tracker, checkpoint_dir=str(folder), **CONFIG)
    return result, dict(tracker.tags), folder


@pytest.mark.slow(seconds=8)
def test_a_patience_run_stops_well_before_its_cap_and_logs_where_and_why(tracking_uri, tmp_path):
    result = runner.invoke(app, ["run", *cli_args(CONFIG), "--tracking-uri", tracking_uri, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    run = only_run(tracking_uri)
    stop = int(run.data.metrics["stop_epoch"])
    assert stop < 50 and run.data.tags["stop_reason"] == "patience" and run.info.status == "FINISHED"
    assert document["stop_reason"] == "patience" and document["summary"]["stop_epoch"] == stop
    # its best validation loss came 3 evaluations before the end, and nothing after it beat it
    losses = history(tracking_uri, run.info.run_id, "val_loss")
    assert [epoch for epoch, _ in losses] == list(range(stop + 1))
    best = int(run.data.metrics["best_val_epoch"])
    assert best == stop - 3 and min(losses[1:], key=lambda p: (p[1], p[0]))[0] == best
    # the summary is logged at the stop epoch; the final figures are the stop epoch's
    client = mlflow_client(tracking_uri)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "best_val_test_acc")] == [stop]
    final_acc = dict(history(tracking_uri, run.info.run_id, "test_acc"))[stop]
    assert run.data.metrics["final_test_acc"] == final_acc
    path = client.download_artifacts(run.info.run_id, "final_weights.pt", str(tmp_path))
    assert torch.load(path, weights_only=True)
    # the one checkpoint kept is the stop epoch's, and the summary table says where and why
    (kept,) = (tmp_path / "initmem-checkpoints").glob("*/ckpt-*.pt")
    assert kept.name == f"ckpt-e{stop:06d}-s000000.pt"
    assert f"epoch {stop} (patience)" in result.output


def assert_same_run(result, tags, reference):
    expected, expected_tags, _ = reference
    assert result.history == expected.history
    assert {k: result.summary.get(k) for k in SUMMARY} == {k: expected.summary.get(k) for k in SUMMARY}
    assert result.summary["stop_epoch"] < 50 and tags["stop_reason"] == expected_tags["stop_reason"] == "patience"
    weights, final = expected.model.state_dict(), result.model.state_dict()
    assert all(torch.equal(weights[k], final[k]) for k in weights)


@pytest.mark.slow(seconds=12)
def test_a_stopped_patience_run_resumed_stops_at_the_same_epoch(tracking_uri, reference):
    with pytest.raises(initmem_core.Stopped):  # SIGTERM in epoch 5: a checkpoint mid-epoch
        initmem_core.run(tracking_uri=tracking_uri, progress=SignalAtStep(4 * STEPS_PER_EPOCH + 2), **CONFIG)
    assert only_run(tracking_uri).info.status == "KILLED"
    resumed = initmem_core.run(tracking_uri=tracking_uri, resume=True, **CONFIG)
    run = only_run(tracking_uri)
    assert_same_run(resumed, run.data.tags, reference)
    assert run.data.metrics["stop_epoch"] == reference[0].summary["stop_epoch"]


class DiesOnceStopped:
    """Progress that raises when the loop, stopping early, skips the cap's remaining steps: after
    the checkpoint of the stop epoch is written, before the run is finished."""

    def start(self, epochs, steps_per_epoch):
        pass

    def advance(self, steps):
        if steps > STEPS_PER_EPOCH:
            raise RuntimeError("the machine died")

    def epoch_done(self, epoch, metrics):
        pass


@pytest.mark.slow(seconds=12)
def test_a_run_that_died_after_its_stop_checkpoint_trains_no_further_when_resumed(tracking_uri, reference):
    with pytest.raises(RuntimeError, match="machine died"):
        initmem_core.run(tracking_uri=tracking_uri, progress=DiesOnceStopped(), **CONFIG)
    assert only_run(tracking_uri).info.status == "FAILED"
    resumed = initmem_core.run(tracking_uri=tracking_uri, resume=True, **CONFIG)
    assert_same_run(resumed, only_run(tracking_uri).data.tags, reference)


@pytest.mark.slow(seconds=8)
def test_patience_with_until_trains_at_least_to_the_target(reference):
    natural = int(reference[0].summary["stop_epoch"])
    target = (natural + 6) * STEPS_PER_EPOCH * CONFIG["lr"]  # T_adapt: lr per step, reached 6 epochs later
    tracker = MemoryTracker()
    result = initmem_core.run(tracker=tracker, until=f"clock_adapt={target}", **CONFIG)
    stop = int(result.summary["stop_epoch"])
    assert stop >= natural + 6 and result.history[-1]["clock_adapt"] >= target * (1 - 1e-9)
    assert tracker.tags["stop_reason"] == result.stop_reason
    # the target held last (patience had run out before it) or patience ran out at or after it
    assert (result.stop_reason, stop) == ("until", natural + 6) or result.stop_reason == "patience"
    assert result.history[: natural + 1] == reference[0].history  # the same run up to the natural stop


@pytest.mark.slow(seconds=6)
def test_a_new_run_of_a_config_that_stopped_early_does_not_take_it_for_unfinished(reference, recwarn):
    folder = reference[2]
    initmem_core.run(tracking=False, checkpoint_dir=str(folder), **CONFIG)
    assert not [w for w in recwarn if "unfinished" in str(w.message)]
    (cell,) = folder.iterdir()
    stop = int(reference[0].summary["stop_epoch"])
    assert [p.name for p in cell.iterdir()] == [f"ckpt-e{stop:06d}-s000000.pt"]  # nothing set aside as unfinished
