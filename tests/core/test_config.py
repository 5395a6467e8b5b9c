"""RunConfig: coercion, validation, TOML, hashing, names."""

from __future__ import annotations

import math
import re

import pytest

from initmem_core.config import RunConfig, from_mapping, load_toml, validate
from initmem_core.errors import ConfigError, UnknownComponentError
from initmem_core.plugin_system.loader import load_registry
from initmem_core.training.plan import plan_run


def test_defaults_are_valid_and_run_name_reads_well():
    plan = plan_run(RunConfig(), load_registry(entry_points=False))
    # named as given: the optimizer's default rate, resolved in the plan, is no setting of the run's
    assert plan.name == "resnet20-sgd-s1.0-seed0" and plan.config.lr > 0
    assert RunConfig(arch="resnet56", opt="muon", sigma=2.0).run_name() == "resnet56-muon-s2.0-seed0"
    assert RunConfig(sigma=0.25, seed=3).run_name() == "resnet20-sgd-s0.25-seed3"


def test_a_run_is_named_by_every_setting_that_differs_from_the_defaults():
    registry = load_registry(entry_points=False)
    rate = plan_run(RunConfig(opt="adam", lr=0.003), registry)
    assert rate.name == "resnet20-adam-lr0.003-s1.0-seed0"
    # two runs that differ in their rate, their target or their data never share a name
    target = from_mapping({"until": "clock_sgd=0.050", "epochs": 100, "batch_size": 32})
    assert target.run_name() == "resnet20-sgd-b32-clock_sgd=0.05-s1.0-seed0"  # --epochs only caps a target
    assert (
        from_mapping({"data": "mnist", "train_size": 256, "epochs": 3}).run_name()
        == "resnet20-sgd-ep3-mnist-n256-s1.0-seed0"
    )
    # what only measures a run is not in its name; nothing a file name or shell would trip on is
    assert RunConfig(eval_size=500, metrics=("ece",)).run_name() == "resnet20-sgd-s1.0-seed0"
    assert RunConfig(opt_arg=("betas=0.9 0.95",)).run_name() == "resnet20-sgd-opt_argbetas=0.9_0.95-s1.0-seed0"


def test_hash_ignores_execution_knobs_but_not_learning_knobs():
    base = RunConfig()
    assert base.config_hash() == RunConfig(threads=4, device="cpu", eval_batch_size=7).config_hash()
    assert base.config_hash() != RunConfig(sigma=2.0).config_hash()
    assert base.config_hash() != RunConfig(seed=1).config_hash()


def test_coercion_from_text_and_toml_values():
    config = from_mapping({"sigma": "2", "batch_size": "128", "epochs": 3.0, "metrics": "a, b"})
    assert (config.sigma, config.batch_size, config.epochs, config.metrics) == (2.0, 128, 3, ("a", "b"))
    with pytest.raises(ConfigError, match="--batch-size: expected a whole number, got '12.5'"):
        from_mapping({"batch_size": "12.5"})
    with pytest.raises(ConfigError, match="--sigma: expected a number, got 'big'"):
        from_mapping({"sigma": "big"})


def test_unknown_key_names_the_closest_valid_key():
    with pytest.raises(
        ConfigError, match=r"unknown key 'sigm' in run.toml \(did you mean 'sigma'\?\); valid keys: amp, arch, "
    ):
        from_mapping({"sigm": 1.0}, "run.toml")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"sigma": 0.0}, "--sigma must be greater than 0"),
        ({"sigma": -1.0}, "--sigma must be greater than 0"),
        ({"sigma": math.nan}, "--sigma must be a finite number"),
        ({"lr": math.inf}, "--lr must be a finite number"),
        ({"lr": -1.0}, "--lr must be 0 or greater"),  # 0 means the optimizer's default
        ({"l2": -1e-4}, "--l2 must be 0 or greater"),
        ({"batch_size": 0}, "--batch-size must be 1 or greater"),
        ({"epochs": 0}, "--epochs must be 1 or greater"),
        ({"momentum": 1.0}, "--momentum must be below 1"),
        ({"schedule": "cosin"}, "--schedule: unknown value 'cosin' (did you mean 'cosine'?); valid values: constant, "),
    ],
)
def test_invalid_values_are_rejected_with_one_line(changes, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        validate(RunConfig(**changes))
    assert "\n" not in str(error.value)


def test_component_names_are_checked_against_the_registry():
    registry = load_registry(entry_points=False)
    with pytest.raises(UnknownComponentError, match=r"unknown architecture 'resnet57' \(did you mean 'resnet56'\?\)"):
        plan_run(RunConfig(arch="resnet57"), registry)
    with pytest.raises(UnknownComponentError, match="unknown metric"):
        plan_run(RunConfig(metrics=("no-such-metric",)), registry)


def test_toml_is_parsed_as_data(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('arch = "resnet56"\nsigma = 2.0\nmetrics = ["weight-norms"]\n')
    assert from_mapping(load_toml(path)) == RunConfig(arch="resnet56", sigma=2.0, metrics=("weight-norms",))
    path.write_text("sigma = = 2")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_toml(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_toml(tmp_path / "missing.toml")


def test_replace_revalidates_types():
    assert RunConfig().replace(sigma="0.5").sigma == 0.5
