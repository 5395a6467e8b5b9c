"""`initmem run` end to end on digits: what lands in MLflow, and what a failure leaves there."""

from __future__ import annotations

import importlib.metadata
import math

import pytest
import torch
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core import hookimpl
from initmem_core.config import FIELDS
from initmem_core.plugin_system.loader import load_registry, set_registry
from initmem_core.vocabulary import PER_EPOCH_METRICS
from tests.support.cli_processes import history, mlflow_client, only_run, stored_runs

pytestmark = pytest.mark.slow  # end-to-end runs through the CLI and MLflow

runner = CliRunner()
SMALL = ["--epochs", "2", "--train-size", "256", "--batch-size", "64", "--threads", "1"]
EPOCH_METRICS = list(PER_EPOCH_METRICS)


def test_cli_run_logs_params_metrics_and_artifacts(tracking_uri, tmp_path):
    result = runner.invoke(app, ["run", *SMALL, "--sigma", "2.0", "--tracking-uri", tracking_uri])
    assert result.exit_code == 0, result.output
    run, client = only_run(tracking_uri), mlflow_client(tracking_uri)
    assert run.info.status == "FINISHED" and run.info.run_name == "resnet20-sgd-ep2-n256-s2.0-seed0"
    assert run.info.run_id in result.stdout
    params = run.data.params
    assert set(FIELDS) <= set(params)
    assert params["sigma"] == "2.0" and params["epochs"] == "2" and params["arch"] == "resnet20"
    assert params["version.torch"] == importlib.metadata.version("torch")
    assert params["provider.optimizer"].startswith("initmem ")
    assert run.data.tags["arch"] == "resnet20" and run.data.tags["opt"] == "sgd"
    # the runs table's columns (tracking.cells.TABLE_FIELDS): each the very text of its param
    assert [run.data.tags[key] for key in ("sigma", "seed", "lr")] == ["2.0", "0", "0.05"]
    for name in EPOCH_METRICS:
        steps = [step for step, _ in history(tracking_uri, run.info.run_id, name)]
        assert steps == [0, 1, 2], name
    for name in ("best_val_test_acc", "best_val_epoch", "final_test_acc"):
        assert name in run.data.metrics
    # tau_interp and repair_gap exist exactly when the run interpolated
    interpolated = max(value for _, value in history(tracking_uri, run.info.run_id, "train_acc")[1:]) >= 0.995
    assert ("tau_interp" in run.data.metrics) == interpolated == ("repair_gap" in run.data.metrics)
    clock = history(tracking_uri, run.info.run_id, "clock_adapt")
    assert clock[-1][1] == pytest.approx(2 * 4 * 0.05)  # 2 epochs x 4 steps x lr
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "layer_norms.csv", "final_weights.pt"} <= artifacts
    weights = client.download_artifacts(run.info.run_id, "final_weights.pt", str(tmp_path))
    state = torch.load(weights, weights_only=True)
    assert "conv1.weight" in state or any(k.endswith("weight") for k in state)
    layer_table = client.download_artifacts(run.info.run_id, "layer_norms.csv", str(tmp_path))
    lines = open(layer_table).read().splitlines()
    assert lines[0].startswith("epoch,layer,weight_norm") and len(lines) > 20


def test_config_file_with_cli_override(tracking_uri, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('opt = "adam"\nlr = 0.001\nsigma = 0.5\nepochs = 1\ntrain_size = 128\n')
    result = runner.invoke(app, ["run", "--config", str(config), "--sigma", "1.5", "--tracking-uri", tracking_uri])
    assert result.exit_code == 0, result.output
    run = only_run(tracking_uri)
    assert (run.data.params["opt"], run.data.params["sigma"], run.data.params["lr"]) == ("adam", "1.5", "0.001")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", "5000"], "--batch-size 5000 is larger than the training set"),
        (["--sigma", "-1"], "--sigma must be greater than 0"),
        (["--lr", "nan"], "--lr must be a finite number"),
        (["--arch", "resnet57"], "unknown architecture 'resnet57' (did you mean 'resnet56'?); valid names: "),
    ],
)
def test_bad_input_exits_2_with_one_line_and_leaves_no_run(tracking_uri, args, message):
    result = runner.invoke(app, ["run", *args, "--tracking-uri", tracking_uri])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert stored_runs(tracking_uri) == []


class ExplodingOptimizer:
    @hookimpl
    def initmem_register_optimizers(self, register):
        register("exploding", ExplodingOptimizer.build, "raises on its first step")

    @staticmethod
    def build(model, config):
        class Exploding(torch.optim.SGD):
            def step(self, closure=None):
                raise RuntimeError("optimizer exploded")

        return Exploding(model.parameters(), lr=config.lr)


def test_crash_marks_the_run_failed(tracking_uri):
    set_registry(load_registry(entry_points=False, extra_plugins=[("exploding", ExplodingOptimizer())]))
    with pytest.raises(RuntimeError, match="optimizer exploded"):
        initmem_core.run(opt="exploding", epochs=1, train_size=128, tracking_uri=tracking_uri)
    run = only_run(tracking_uri)
    assert run.info.status == "FAILED"
    assert "optimizer exploded" in run.data.tags["failure_reason"]


def test_api_run_without_tracking_is_reproducible_and_seed_sensitive():
    kwargs = dict(epochs=1, train_size=128, batch_size=32, tracking=False, threads=1)
    first, again = initmem_core.run(seed=0, **kwargs), initmem_core.run(seed=0, **kwargs)
    other = initmem_core.run(seed=1, **kwargs)
    assert first.history == again.history
    assert first.history != other.history
    assert [row["epoch"] for row in first.history] == [0, 1]
    assert all(math.isfinite(v) for v in first.history[-1].values())


def test_paired_initialization_in_a_run(kept_settings):
    """sigma is the only thing that changes the initial weights: W0(2) == 2 * W0(1)."""
    from initmem_core.config import RunConfig
    from initmem_core.kernels import kernel_parameters
    from initmem_core.training.plan import plan_run
    from initmem_core.training.setup import build_setup

    registry = load_registry(entry_points=False)
    one = build_setup(plan_run(RunConfig(sigma=1.0, train_size=64), registry))
    two = build_setup(plan_run(RunConfig(sigma=2.0, train_size=64), registry))
    kernels = [name for name, _ in kernel_parameters(one.model)]
    assert len(kernels) == 20  # resnet20: 19 convs + the classifier
    for name in kernels:
        assert torch.equal(two.initial_params[name], 2 * one.initial_params[name]), name


def test_cli_run_with_gpu_speed_knobs_trains_on_cpu_and_logs_its_precision(tracking_uri):
    """What a GPU user types works on a CPU machine too, and the run records its precision."""
    result = runner.invoke(
        app, ["run", *SMALL, "--amp", "bf16", "--channels-last", "--tf32", "on", "--tracking-uri", tracking_uri]
    )
    assert result.exit_code == 0, result.output
    run = only_run(tracking_uri)
    params = run.data.params
    assert run.info.status == "FINISHED"
    assert (params["tf32"], params["amp"], params["channels_last"]) == ("on", "bf16", "True")
    assert [step for step, _ in history(tracking_uri, run.info.run_id, "test_acc")] == [0, 1, 2]
