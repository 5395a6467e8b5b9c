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
from initmem_core.training.plan import plan_horizons

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
    assert step.eval_seconds_per_example > 0
    # Evaluation counted: epochs 0, 1 and 2 each score the training set and both splits, whole.
    facts = cost.dataset_facts(plan.plans[0])
    assert one.evaluated_examples == 3 * 3 * (facts.train + facts.val + facts.test)
    assert one.eval_seconds == pytest.approx(one.evaluated_examples * step.eval_seconds_per_example)
    assert one.cpu_seconds == pytest.approx(one.steps * step.seconds + one.eval_seconds)
    two = cost.estimate_cost(
        plan.plans, workers=2, horizons=horizons, gpu_figures=tmp_path / "none.json", budget_s=0.05
    )
    assert two.cpu_seconds == pytest.approx((two.steps * two.step_times[0].seconds + 2 * two.eval_seconds) / 2)
    assert one.gpu_seconds is None and "no gpu_check figures exist yet" in one.gpu_source


def test_eval_size_caps_what_each_evaluation_scores_and_adds_the_whole_test_split_once():
    [plan] = plan_sweep({"epochs": 4, "eval_size": 50, "eval_every": 2, "train_eval_size": 100}).plans
    # evaluation points 0, 2, 4; each 100 training, 50 validation, 50 test examples; then 10,000 once
    assert cost.evaluated_examples(plan.config, 4, 5000, (6000, 10_000)) == 3 * (100 + 50 + 50) + 10_000
    assert cost.evaluated_examples(plan.config, 5, 5000, (40, 40)) == 4 * (100 + 40 + 40)  # cap above: no rescoring
    [declared] = plan_sweep({"data": "fashion-mnist"}).plans
    facts = cost.dataset_facts(declared)  # what its plugin declares: no files needed
    assert (facts.val, facts.test) == (6000, 10_000)


def test_on_a_gpu_the_estimate_reads_gpu_checks_step_figure(tmp_path):
    figures = tmp_path / "gpu_check.json"
    rows = [
        {"arch": "resnet20", "precision": "bf16", "compile_mode": "default", "channels_last": True, "step_ms": 1.0},
        {"arch": "resnet20", "precision": "fp32", "compile_mode": "", "channels_last": False, "step_ms": 4.0},
    ]
    figures.write_text(json.dumps({"machine": {"gpu": "NVIDIA H200"}, "steps": {"speed": {"rows": rows}}}))
    plan = small_plan()
    estimate = cost.estimate_cost(plan.plans, gpu_figures=figures, budget_s=0.05)
    assert estimate.gpu_seconds == pytest.approx(estimate.steps * 4.0 / 1e3)  # the fp32 eager figure
    assert "NVIDIA H200" in estimate.gpu_source and "fp32 eager" in estimate.gpu_source
    other = cost.estimate_cost(
        plan_sweep({"arch": ["resnet56"], "epochs": 1}).plans, gpu_figures=figures, budget_s=0.05
    )
    assert other.gpu_seconds is None and "measured no step of resnet56" in other.gpu_source


def test_the_installed_gpu_figures_are_a_complete_gpu_check_run_naming_its_gpu():
    """The package data `initmem sweep --dry-run` reads: a complete run, with a figure for both
    architectures it measures and the GPU it ran on named in the estimate."""
    results = json.loads(cost.GPU_FIGURES.read_text())
    assert results["complete"] and not results["dry_run"]
    for arch in ("resnet20", "resnet9"):
        found = cost.gpu_step_ms(arch)
        assert found is not None and found[0] > 0
        assert found[1].startswith(f"{results['machine']['gpu']}, fp32 eager"), found


def test_a_dataset_not_on_this_machine_is_sized_from_what_its_plugin_declares():
    [cell] = plan_sweep({"data": "cifar10", "train_size": 1000}).plans
    assert cost.dataset_facts(cell) == cost.DatasetFacts((3, 32, 32), 10, 1000, 5000, 10_000)
    [cifar100] = plan_sweep({"data": "cifar100"}).plans
    assert cost.dataset_facts(cifar100).classes == 100


def test_a_dataset_that_declares_nothing_is_sized_from_the_dataset_built_here():
    [cell] = plan_sweep({"data": "synthetic:1x8x8-c4-n40"}).plans
    assert cell.components["dataset"].spec.info.splits is None
    facts = cost.dataset_facts(cell)
    assert (facts.shape, facts.classes, facts.train) == ((1, 8, 8), 4, 40)


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
    assert "estimated time here:" in result.stdout and "with 2 worker(s)" in result.stdout
    assert "resnet20" in result.stdout and "ms/step at batch 64" in result.stdout
    assert "estimated on a GPU:" in result.stdout


@pytest.mark.slow(seconds=13)  # a real 2-cell digits sweep, and the dry run's measurement beside it (~20 s)
def test_the_estimate_is_within_twice_a_measured_small_sweep(tracking_uri, tmp_path, monkeypatch):
    """The dry run's estimate (training and evaluation, on this machine, now) against the cells'
    own durations in the store (from start to end of each run: data, model, training, every
    evaluation, logging). The sweep's own start-up, report and plots are in neither. The estimate
    is taken before and after the sweep and averaged: a machine shared with other work is not
    equally loaded at every moment, and the sweep runs through both."""
    from mlflow.tracking import MlflowClient

    from initmem_core.sweep.launch import run_sweep
    from initmem_plugins.executors.local import LocalExecutor

    monkeypatch.chdir(tmp_path)
    spec = {"sigma": [0.5, 2.0], "data": "digits", "epochs": 6, "train_size": 512, "threads": 1, "checkpoint_every": 0}
    plan = plan_sweep(spec)

    def estimate() -> cost.CostEstimate:  # at the dry run's own budget (conftest lowers it for the others)
        return cost.estimate_cost(plan.plans, horizons=plan_horizons(plan.plans), budget_s=0.5)

    before = estimate()
    assert before.eval_seconds is not None and before.eval_seconds > 0
    # each cell in its own process, as the estimate counts them (a fused job's cells share its time)
    lone = LocalExecutor(lockstep="off")
    result = run_sweep(spec, name="timed", tracking_uri=tracking_uri, out=tmp_path / "out", executor=lone)
    after = estimate()
    client = MlflowClient(tracking_uri)
    runs = [client.get_run(cell.run_id).info for cell in result.cells]
    measured = sum((run.end_time - run.start_time) / 1e3 for run in runs)
    assert len(runs) == 2 and measured > 0
    estimated = (before.cpu_seconds + after.cpu_seconds) / 2
    assert measured / 2 <= estimated <= measured * 2, (before.cpu_seconds, after.cpu_seconds, measured)
