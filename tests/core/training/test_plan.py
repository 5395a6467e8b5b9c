"""A run's plan (``training.plan``) is made once: one registry look-up per component a run uses."""

from __future__ import annotations

from collections import Counter

import pytest

import initmem_core
from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError, UnknownComponentError
from initmem_core.plugin_system.loader import load_registry
from initmem_core.training.plan import plan_run
from tests.support.cli_processes import SYNTHETIC


def counting_registry():
    """A registry whose ``lookup`` counts each (kind, name) it is asked for."""
    registry = load_registry(entry_points=False)
    counts: Counter[tuple[str, str]] = Counter()
    lookup = registry.lookup

    def counted(kind, name):
        counts[(kind, name)] += 1
        return lookup(kind, name)

    registry.lookup = counted
    return registry, counts


@pytest.mark.parametrize(
    "values",
    [
        dict(opt="sgd", momentum=0.9, l2=0.01),  # a regularizer built
        dict(opt="adam", until="clock_adapt=0.01", epochs=50),  # --until plans the epochs from the rule
    ],
)
def test_one_run_looks_each_component_up_once(values):
    registry, counts = counting_registry()
    config = RunConfig(**SYNTHETIC, batch_size=32, epochs=values.pop("epochs", 1), **values)
    initmem_core.run(config, tracking=False, registry=registry)
    repeated = {key: count for key, count in counts.items() if count > 1}
    assert not repeated, f"looked up more than once: {repeated}"
    single = {"dataset": config.data, "architecture": config.arch, "initializer": config.init}
    single |= {"optimizer": config.opt, "regularizer": config.reg}
    assert {(kind, name) for kind, name in single.items()} <= set(counts)
    metrics = {*registry.defaults("metric"), *config.metrics}
    assert {name for kind, name in counts if kind == "metric"} == metrics
    assert {kind for kind, _ in counts} == {*single, "metric"}


def test_the_plan_holds_the_resolved_config_and_the_declared_rule():
    registry = load_registry(entry_points=False)
    config = RunConfig(**SYNTHETIC, opt="sgd", momentum=0.5, opt_arg=("dampening=0.5", "nesterov=false"))
    plan = plan_run(config, registry)
    declared_lr = registry.lookup("optimizer", "sgd")[0].info.declared_defaults()["lr"]
    assert config.lr == 0 and plan.config == config.replace(lr=declared_lr, opt_arg=("dampening=0.5",))
    assert plan.config.lr > 0 and plan.config.opt_arg == ("dampening=0.5",)  # the default nesterov dropped
    assert plan.options["dampening"] == 0.5 and plan.options["nesterov"] is False
    assert plan.optimizer.spec.name == "sgd" and plan.clock == "heavy-ball"
    assert plan.rule.lr == plan.config.lr and (plan.rule.momentum, plan.rule.dampening) == (0.5, 0.5)
    assert plan.rule.eta(1.0) == pytest.approx(plan.config.lr * 0.5 / 0.5)
    with pytest.raises(AttributeError):
        plan.clock = "lr"  # frozen


def test_a_bad_config_fails_in_the_plan_as_validation_would():
    registry = load_registry(entry_points=False)
    with pytest.raises(UnknownComponentError):
        plan_run(RunConfig(**SYNTHETIC, opt="no-such-optimizer"), registry)
    with pytest.raises(ConfigError, match="--opt-arg bogus"):
        plan_run(RunConfig(**SYNTHETIC, opt="sgd", opt_arg=("bogus=1",)), registry)


def test_from_build_setup_the_config_goes_straight_down():
    from tests.support.call_path import from_build_setup

    path = from_build_setup(opt="sgd", momentum=0.9, until="clock_sgd=0.001", epochs=50)
    assert path.entered("horizons") == 0  # plan_run found the epochs --until sets
    assert path.entered("optimizer_options") == 0  # the plan holds the settings already
    assert path.climbs == 0 and path.returns == 0


def test_a_run_derives_its_hash_params_and_checkpoint_folder_once(tmp_path, monkeypatch):
    """The plan carries the config hash, the MLflow params and the checkpoint folder: the runner,
    the checkpoint header and the lease read them from it, never from the config again."""
    hashed = Counter()
    config_hash = RunConfig.config_hash

    def counted(self):
        hashed[self] += 1
        return config_hash(self)

    monkeypatch.setattr(RunConfig, "config_hash", counted)
    config = RunConfig(**{**SYNTHETIC, "checkpoint_every": 1}, batch_size=32, epochs=2, checkpoint_dir=str(tmp_path))
    result = initmem_core.run(config, tracking=False, registry=load_registry(entry_points=False))
    assert sum(hashed.values()) == 1
    [folder] = tmp_path.iterdir()  # <checkpoint dir>/<config hash>/
    assert folder.name == result.config_hash == config_hash(result.config)


def test_the_plan_places_its_checkpoints_beside_the_store_or_in_the_folder_given(tmp_path):
    registry = load_registry(entry_points=False)
    every = {**SYNTHETIC, "checkpoint_every": 1}
    plan = plan_run(RunConfig(**every), registry, f"sqlite:///{tmp_path}/mlflow.db")
    assert plan.checkpoints == tmp_path / "initmem-checkpoints" / plan.config_hash
    assert plan.params["config_hash"] == plan.config_hash and plan.params["clock_convention"].startswith("heavy-ball")
    assert plan_run(RunConfig(**every), registry).checkpoints is None  # no store, no --checkpoint-dir
    given = plan_run(RunConfig(**every, checkpoint_dir=str(tmp_path / "c")), registry)
    assert given.checkpoints == tmp_path / "c" / given.config_hash
    assert plan_run(RunConfig(**SYNTHETIC), registry, "sqlite:///x.db").checkpoints is None  # --checkpoint-every 0
