"""A non-finite loss or weight stops the run at once and records it as diverged."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core import Diverged, hookimpl
from initmem_core.plugin_system.loader import load_registry, set_registry
from tests.support.cli_processes import SMALL, cli_args, history, only_run

runner = CliRunner()
STEPS_PER_EPOCH = 4  # train_size 128, batch size 32
ARGS = cli_args(SMALL)


def poisoning_sgd(model, at_step: int, poison):
    """SGD that, after its ``at_step``-th step, applies ``poison(model)`` (in place, no grad)."""

    class Poisoning(torch.optim.SGD):
        steps = 0

        def step(self, closure=None):
            super().step(closure)
            Poisoning.steps += 1
            if Poisoning.steps == at_step:
                with torch.no_grad():
                    poison(model)

    return Poisoning(model.parameters(), lr=0.05)


def nan_into_first_conv(model):
    next(p for p in model.parameters() if p.ndim == 4).view(-1)[0] = math.nan


def inf_into_batchnorm_statistics(model):
    # Train mode normalises with batch statistics, so the loss stays finite; only the weights check sees it.
    next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)).running_var.fill_(math.inf)


class Poisons:
    @hookimpl
    def initmem_register_optimizers(self, register):
        register("nan-after-step-6", lambda model, config: poisoning_sgd(model, 6, nan_into_first_conv))
        register("inf-bn-after-step-4", lambda model, config: poisoning_sgd(model, 4, inf_into_batchnorm_statistics))


@pytest.fixture(autouse=True)
def poisons():
    set_registry(load_registry(entry_points=False, extra_plugins=[("poisons", Poisons())]))


def test_a_nan_loss_stops_the_run_at_the_next_step(tracking_uri):
    with pytest.raises(Diverged) as diverged:
        initmem_core.run(opt="nan-after-step-6", tracking_uri=tracking_uri, **SMALL)
    assert (diverged.value.epoch, diverged.value.step) == (2, 7)  # the first step that sees the NaN weight
    run = only_run(tracking_uri)
    assert run.info.status == "FAILED"
    tags = run.data.tags
    assert (tags["diverged"], tags["diverged_epoch"], tags["diverged_step"]) == ("true", "2", "7")
    assert "the training loss is not finite" in tags["failure_reason"]
    losses = history(tracking_uri, run.info.run_id, "train_loss")
    assert [step for step, _ in losses] == [0, 1] and all(math.isfinite(value) for _, value in losses)


def test_a_non_finite_weight_stops_the_run_before_its_epoch_is_logged(tracking_uri):
    args = ["run", *ARGS, "--opt", "inf-bn-after-step-4", "--tracking-uri", tracking_uri, "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "diverged in epoch 1: a weight or BatchNorm statistic is not finite" in result.stderr
    assert "diverged=true" in result.stderr and "Traceback" not in result.output
    run = only_run(tracking_uri)
    assert run.info.status == "FAILED" and run.data.tags["diverged_epoch"] == "1"
    # --json describes the run as stored: its hash is of the config with the optimizer's lr resolved
    answer = json.loads(result.stdout)
    assert answer["run_id"] == run.info.run_id and answer["config_hash"] == run.data.tags["config_hash"]
    assert [step for step, _ in history(tracking_uri, run.info.run_id, "val_loss")] == [0]
