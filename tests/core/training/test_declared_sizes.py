"""A dataset's declared sizes (``contracts.DatasetInfo``) are what it builds: ``plan_run`` finds an
``--until`` run's epochs from them, before any data is read, and the setup never finds them again."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.loader import load_registry
from initmem_core.training.plan import plan_run
from initmem_core.training.setup import build_setup, process_settings_kept
from initmem_plugins.datasets import cifar, mnist

#: The official (train, test) files of each dataset that reads files, as the loaders split them.
OFFICIAL = {
    "cifar10": (50_000, 10_000),
    "cifar100": (50_000, 10_000),
    "mnist": (60_000, 10_000),
    "fashion-mnist": (60_000, 10_000),
}
#: The options that change the training set (--train-size) and those that must not.
OPTIONS = [{}, {"train_size": 100}, {"eval_size": 64, "train_eval_size": 32, "data_seed": 3}]
UNTIL = dict(opt="adam", until="clock_adapt=1.0", epochs=1000, batch_size=64)


def official_sized(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The loader of ``name`` reads official-sized files of 1x1 images: its own split, no files."""
    n_train, n_test = OFFICIAL[name]

    def files(n: int) -> SimpleNamespace:
        return SimpleNamespace(data=torch.zeros(n, 1, 1, dtype=torch.uint8), targets=torch.arange(n) % 10)

    if name.startswith("cifar"):
        monkeypatch.setattr(cifar, "_read", lambda *args, **kwargs: (files(n_train), files(n_test)))
        monkeypatch.setattr(cifar, "_to_tensors", lambda read: (read.data.unsqueeze(1), read.targets))
    else:
        monkeypatch.setattr(mnist, "find_files", lambda config, name: {})
        monkeypatch.setattr(mnist, "_read", lambda name, found: (files(n_train), files(n_test)))


def test_every_builtin_dataset_declares_its_sizes():
    registry = load_registry(entry_points=False)
    undeclared = [name for name in registry.names("dataset") if registry.lookup("dataset", name)[0].info.splits is None]
    assert undeclared == ["synthetic:*"]  # a family: its sizes are its variant's (counted when planned)


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_the_declared_training_set_is_the_one_a_file_dataset_builds(monkeypatch, name, options):
    official_sized(monkeypatch, name)
    registry = load_registry(entry_points=False)
    plan = plan_run(RunConfig(data=name, **UNTIL, **options), registry)
    built = registry.build("dataset", name, config=plan.trains)
    assert plan.n_train == len(built.train_y) == (options.get("train_size") or OFFICIAL[name][0] * 9 // 10)
    declared = registry.lookup("dataset", name)[0].info.splits
    assert declared == (OFFICIAL[name][0] * 9 // 10, OFFICIAL[name][0] // 10, OFFICIAL[name][1])
    assert (len(built.val_y), len(built.test_y)) == declared[1:]


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("name", ["digits", "synthetic", "synthetic:1x8x8-c4-n200"])
def test_the_planned_training_set_is_the_one_the_setup_loads(name, options):
    plan = plan_run(
        RunConfig(data=name, arch="resnet20", device="cpu", threads=1, **UNTIL, **options),
        load_registry(entry_points=False),
    )
    with process_settings_kept():
        setup = build_setup(plan)
    assert setup.train_loader.num_examples == plan.n_train
    assert len(setup.train_loader) == math.ceil(plan.n_train / 64)
    assert setup.config is plan.trains and setup.config.epochs < plan.config.epochs  # the target set them


def test_a_dataset_declaring_other_sizes_than_it_builds_fails_in_one_line():
    registry = load_registry(entry_points=False)
    digits, _ = registry.lookup("dataset", "digits")
    wrong = dataclasses.replace(digits, info=dataclasses.replace(digits.info, splits=(1000, 359, 359)))
    plan = plan_run(RunConfig(data="digits", **UNTIL, device="cpu"), registry.with_component(wrong))
    assert plan.n_train == 1000
    with process_settings_kept(), pytest.raises(ConfigError, match=r"declares 1000 training examples .* but has 1079"):
        build_setup(plan)


def test_a_dataset_that_declares_no_sizes_is_counted_once_when_planned(monkeypatch):
    registry = load_registry(entry_points=False)
    digits, _ = registry.lookup("dataset", "digits")
    bare = dataclasses.replace(digits, info=dataclasses.replace(digits.info, splits=None))
    plan = plan_run(RunConfig(data="digits", **UNTIL, train_size=500), registry.with_component(bare))
    assert plan.n_train == 500
    missing = dataclasses.replace(bare, factory=lambda config: (_ for _ in ()).throw(FileNotFoundError("no files")))
    with pytest.raises(ConfigError, match=r"declare \(register it with splits=.*no files"):
        plan_run(RunConfig(data="digits", **UNTIL), registry.with_component(missing))
