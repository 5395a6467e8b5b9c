"""The precision and speed knobs a GPU user turns (--tf32, --amp, --channels-last, --compile,
--eval-every, an optimizer's fused/foreach), each run on the CPU against the plain path, and the
rule that decides whether a knob is part of the config hash: a knob that changes the numbers
(precision, what is evaluated when) is hashed, one that only reorders fp32 work is not."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import initmem_core
from initmem_core.config import RunConfig
from initmem_core.plugin_system.loader import get_registry
from initmem_core.tracking.tracker import MemoryTracker
from initmem_core.training import loop, setup
from initmem_core.training.plan import plan_run
from tests.support.cli_processes import SMALL

#: The shared small run for two epochs, untracked and without checkpoints.
TINY = dict(SMALL, arch="resnet20", epochs=2, checkpoint_every=0, tracking=False)


def run_tiny(**changes):
    return initmem_core.run(**{**TINY, **changes})


def history_of(**changes):
    return run_tiny(**changes).history


# -- the config hash ------------------------------------------------------------------------------


def test_knobs_that_change_the_numbers_are_hashed_and_knobs_that_reorder_fp32_work_are_not():
    plain = RunConfig()
    assert RunConfig(tf32="on").config_hash() != plain.config_hash()
    assert RunConfig(amp="bf16").config_hash() != plain.config_hash()
    assert RunConfig(eval_every=5).config_hash() != plain.config_hash()
    for same in (
        RunConfig(tf32="off"),
        RunConfig(eval_every=1),
        RunConfig(channels_last=True),
        RunConfig(compile=True, compile_mode="reduce-overhead"),
        RunConfig(opt_arg=("fused=true",)),
        RunConfig(opt_arg=("foreach=false", "fused=true")),
    ):
        assert same.config_hash() == plain.config_hash(), same
    assert (
        RunConfig(opt_arg=("fused=true", "nesterov=true")).config_hash()
        == RunConfig(opt_arg=("nesterov=true",)).config_hash()
        != plain.config_hash()
    )


# -- tf32 -----------------------------------------------------------------------------------------


@pytest.fixture
def fp32_flags():
    with setup.process_settings_kept():
        yield


def test_tf32_on_sets_both_gpu_fp32_flags_and_off_sets_ieee_fp32(fp32_flags):
    setup.use_precision("on")
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    setup.use_precision("off")  # PyTorch's own default leaves cuDNN convolutions on TF32
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


def test_a_run_logs_its_tf32_setting_applies_it_for_gpu_kernels_and_puts_it_back_after(monkeypatch):
    applied, build = [], setup.build_setup

    def building(plan):
        built = build(plan)
        applied.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
        return built

    monkeypatch.setattr(setup, "build_setup", building)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    tracker = MemoryTracker()
    run_tiny(epochs=1, tracking=True, tf32="on", tracker=tracker)
    assert tracker.params["tf32"] == "on" and applied[-1] == (True, True)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    tracker = MemoryTracker()
    run_tiny(epochs=1, tracking=True, tracker=tracker)
    assert tracker.params["tf32"] == "off" and applied[-1] == (False, False)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


# -- evaluation under the training's precision, memory format and compiled model -------------------


def test_evaluation_under_bf16_autocast_is_within_half_a_point_of_fp32_on_digits(kept_settings):
    """The same trained weights scored on the digits test set in fp32 and under bf16 autocast."""
    values = {**TINY, "epochs": 3, "train_size": 512}
    del values["tracking"]
    plan = plan_run(initmem_core.RunConfig(**values), get_registry())
    built = setup.build_setup(plan)
    loop.train(built, lambda metrics, step: None)
    _, fp32_acc, _ = loop.evaluate_correct(built, "test")
    # The setup trains and evaluates by the plan's ``trains`` form of the config: both forms change.
    bf16_plan = dataclasses.replace(
        plan, config=plan.config.replace(amp="bf16"), trains=plan.trains.replace(amp="bf16")
    )
    bf16 = setup.TrainingSetup(**{**vars(built), "plan": bf16_plan})
    assert bf16.config.amp == "bf16" and built.config.amp != "bf16"
    _, bf16_acc, _ = loop.evaluate_correct(bf16, "test")
    assert 0.5 < fp32_acc  # a model that learnt something, so the comparison means something
    assert abs(bf16_acc - fp32_acc) <= 0.005


def test_evaluation_runs_under_the_runs_autocast(monkeypatch):
    seen = []
    real = torch.autocast

    def spying(*args, **kwargs):
        seen.append(kwargs.get("dtype"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "autocast", spying)
    history = history_of(amp="bf16", epochs=1)
    evaluations = 2 * 3  # epochs 0 and 1, each on train, val and test
    steps = 4  # train_size 128 / batch 32
    assert seen.count(torch.bfloat16) >= evaluations * 1 + steps
    assert len(history) == 2


def test_channels_last_trains_and_evaluates_like_the_plain_path_on_cpu():
    plain, channels_last = history_of(), history_of(channels_last=True)
    for a, b in zip(plain, channels_last):
        assert b["test_acc"] == pytest.approx(a["test_acc"], abs=0.02)
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-3)


@pytest.mark.slow  # TorchDynamo traces the model four ways: tens of seconds
def test_a_compiled_gpu_model_is_compiled_once_per_process_and_architecture(monkeypatch):
    """Two cells of one architecture, three epochs each: one graph for training and one for
    evaluation in all, and the numbers are those of the plain (eager) path."""
    counter, wraps = CompileCounter(), []
    real = torch.compile

    def counting(model, **kwargs):
        wraps.append(kwargs.get("mode"))
        return real(model, backend=counter)

    monkeypatch.setattr(torch, "compile", counting)
    torch._dynamo.reset()
    compiled = [history_of(compile=True, compile_mode="reduce-overhead", epochs=3, seed=0)]
    first_cell = counter.frame_count
    compiled.append(history_of(compile=True, compile_mode="reduce-overhead", epochs=3, seed=1))
    assert wraps == ["reduce-overhead", "reduce-overhead"]  # once per cell, not per epoch
    # Training, evaluation, and evaluation again once a second batch size makes that dimension
    # dynamic (the splits differ in size); the second cell compiles nothing.
    assert 2 <= first_cell <= 3
    assert counter.frame_count == first_cell
    eager = [history_of(epochs=3, seed=seed) for seed in (0, 1)]
    for ran, plain in zip(compiled, eager):
        assert [row["test_acc"] for row in ran] == [row["test_acc"] for row in plain]
        assert [row["train_loss"] for row in ran] == pytest.approx([row["train_loss"] for row in plain], rel=1e-5)


# -- --eval-every ---------------------------------------------------------------------------------


def test_eval_every_evaluates_every_nth_epoch_and_the_last_and_reads_tau_interp_there():
    tracker = MemoryTracker()
    result = run_tiny(tracking=True, epochs=7, eval_every=3, tracker=tracker)
    assert [row["epoch"] for row in result.history] == [0, 3, 6, 7]
    assert sorted({step for step, key, _ in tracker.metrics if key == "test_acc"}) == [0, 3, 6, 7]
    assert tracker.params["eval_every"] == 3
    tau = result.summary.get("tau_interp")
    assert tau is None or tau in (3, 6, 7)
    assert result.summary["best_val_epoch"] in (0, 3, 6, 7)


def test_eval_every_keeps_training_identical_between_evaluation_points():
    every, each = history_of(epochs=4, eval_every=2), history_of(epochs=4)
    assert [row["epoch"] for row in every] == [0, 2, 4]
    by_epoch = {row["epoch"]: row for row in each}
    for row in every:
        assert row["test_acc"] == by_epoch[row["epoch"]]["test_acc"]
        assert row["weight_norm"] == pytest.approx(by_epoch[row["epoch"]]["weight_norm"], rel=1e-6)


# -- fused / foreach ------------------------------------------------------------------------------


@pytest.mark.parametrize("opt, option", [("sgd", "foreach=false"), ("adam", "fused=true"), ("adamw", "foreach=true")])
def test_an_optimizers_fused_or_foreach_execution_matches_the_plain_path(opt, option):
    plain = history_of(opt=opt, epochs=1)
    executed = run_tiny(epochs=1, opt=opt, opt_arg=(option,))
    assert [item.lower() for item in executed.config.opt_arg] == [option]  # accepted, spelt canonically
    assert executed.config.config_hash() == executed.config.replace(opt_arg=()).config_hash()
    for a, b in zip(plain, executed.history):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)
