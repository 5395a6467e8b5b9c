"""What a preset costs: ``initmem sweep --dry-run`` states its training time, estimated here from
a measured step of each architecture and on a GPU from gpu_check's figures (or says there are none)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.sweep import cost
from initmem_core.sweep.grid import plan_sweep
from initmem_core.training.horizons import plan_horizons

runner = CliRunner()


def small_plan():
    return plan_sweep({"arch": ["resnet20"], "sigma": [0.5, 1.0, 2.0], "epochs": 2, "batch_size": 32})


def test_the_estimate_is_the_measured_step_times_the_steps_over_the_workers(tmp_path):
    plan = small_plan()
    horizons = plan_horizons(plan.plans)
    one = cost.estimate_cost(plan.plans, horizons=horizons, gpu_figures=tmp_path / "none.json", budget_s=0.05)
    assert one.steps == sum(h.epochs * h.steps_per_epoch for h in horizons) > 0
    [step] = one.step_times  # one architecture, batch size and shape: measured once
    assert (step.arch, step.batch_size, step.shape) == ("resnet20", 32, (1, 8, 8)) and step.seconds > 0
    assert one.cpu_seconds == pytest.approx(one.steps * step.seconds)
    two = cost.estimate_cost(
        plan.plans, workers=2, horizons=horizons, gpu_figures=tmp_path / "none.json", budget_s=0.05
    )
    assert two.cpu_seconds == pytest.approx(two.steps * two.step_times[0].seconds / 2)
    assert one.gpu_seconds is None and "no gpu_check figures exist yet" in one.gpu_source


def test_on_a_gpu_the_estimate_reads_gpu_checks_step_figure(tmp_path):
    figures = tmp_path / "gpu_check.json"
    rows = [
        {"arch": "resnet20", "precision": "bf16", "compile_mode": "default", "channels_last": True, "step_ms": 1.0},
        {"arch": "resnet20", "precision": "fp32", "compile_mode": "", "channels_last": False, "step_ms": 4.0},
    ]
    figures.write_text(json.dumps({"device": "NVIDIA H200", "steps": {"speed": {"rows": rows}}}))
    plan = small_plan()
    estimate = cost.estimate_cost(plan.plans, gpu_figures=figures, budget_s=0.05)
    assert estimate.gpu_seconds == pytest.approx(estimate.steps * 4.0 / 1e3)  # the fp32 eager figure
    assert "NVIDIA H200" in estimate.gpu_source and "fp32 eager" in estimate.gpu_source
    other = cost.estimate_cost(
        plan_sweep({"arch": ["resnet56"], "epochs": 1}).plans, gpu_figures=figures, budget_s=0.05
    )
    assert other.gpu_seconds is None and "measured no step of resnet56" in other.gpu_source


def test_a_dataset_not_on_this_machine_is_sized_from_its_description():
    [cell] = plan_sweep({"data": "cifar10", "train_size": 1000}).plans
    assert cost.dataset_facts(cell) == ((3, 32, 32), 10, 1000)


def test_a_step_too_long_for_the_budget_is_measured_at_a_smaller_batch_and_scaled():
    [plan] = plan_sweep({"arch": ["resnet20"], "batch_size": 128}).plans
    step = cost.measure_step(plan, (3, 32, 32), 10, budget_s=1e-6)
    assert step.measured_batch == cost.SMALL_BATCH and step.batch_size == 128
    assert math.isfinite(step.seconds) and step.seconds > 0


def test_the_dry_run_states_the_estimated_time():
    result = runner.invoke(
        app, ["sweep", "--sigma", "0.5,1", "--epochs", "1", "--workers", "2", "--dry-run"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "estimated training time here:" in result.stdout and "with 2 worker(s)" in result.stdout
    assert "resnet20" in result.stdout and "ms/step at batch 64" in result.stdout
    assert "estimated on a GPU:" in result.stdout
