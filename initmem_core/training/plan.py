"""A run's plan: everything a run derives from its config, the registry and its store, worked out once.

``plan_run(config, registry, store_uri)`` checks the config (``config.validate``), looks each
component it names up once (and the metrics every run computes), resolves the optimizer's
settings (``optimizer_options.settle``), settles its clock convention and ``StepRule`` (how a
scheduled rate becomes the clocks' effective step), and derives the config hash, the MLflow
params and the checkpoint folder. The setup, the runner, the sweep and ``training.horizons``
read the ``RunPlan``; none derives these again. ``--until``'s epochs need the training set's
size: ``horizons.resolve_until(plan, n_train)`` returns the plan with them. Imports no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from initmem_core.config import RunConfig, validate
from initmem_core.kinds import KINDS
from initmem_core.plugin_system import optimizer_options
from initmem_core.plugin_system.registry import ComponentSpec, Registry
from initmem_core.training.checkpoint_store import default_root
from initmem_core.training.clocks import CONVENTIONS, DEFAULT_CONVENTION, check_convention, effective_step
from initmem_core.vocabulary import CONFIG_HASH_TAG


@dataclass(frozen=True)
class StepRule:
    """How the scheduled rate of a step becomes the clocks' effective step ``eta`` and how much of
    it shrinks the weights, as the optimizer declares them. The loop ticks its clocks with
    ``eta(lr_multiplier(step))`` and ``training.horizons`` replays the same calls, so a run and
    its ``--until`` plan count alike by construction."""

    lr: float  # the peak rate (the param group's initial lr)
    convention: str = DEFAULT_CONVENTION  # heavy-ball: eta = lr*(1-dampening)/(1-momentum); lr: eta = lr
    momentum: float = 0.0
    dampening: float = 0.0
    shrink: float = 0.0  # lambda = --l2 (when its regularizer is built) + --weight-decay

    def eta(self, multiplier: float) -> float:
        """The effective step at schedule multiplier ``multiplier``: ``effective_step`` of the
        param group the scheduler makes (``lr * multiplier``) with the declared momentum."""
        group = {"lr": self.lr * multiplier, "momentum": self.momentum, "dampening": self.dampening}
        return effective_step(group, self.convention)


@dataclass(frozen=True)
class Component:
    """A component the run builds: its spec and, for a family such as ``timm:*``, the variant."""

    spec: ComponentSpec
    variant: str | None

    def build(self, **kwargs: Any) -> Any:
        return self.spec.build(self.variant, **kwargs)


def config_params(config: RunConfig, config_hash: str) -> dict[str, Any]:
    """The config as every run logs it, and as a sweep logs its cell's child run when it creates
    it (so even a cell that fails before ``run`` logs anything carries its config). List fields
    are comma-joined (``config.coerce`` reads them back), each ``--opt-arg`` is also its own param."""
    values = {key: ",".join(value) if isinstance(value, list) else value for key, value in config.to_dict().items()}
    for item in config.opt_arg:
        key, _, value = item.partition("=")
        values[f"opt_arg.{key}"] = value
    return {**values, CONFIG_HASH_TAG: config_hash}


def checkpoint_folder(config: RunConfig, config_hash: str, store_uri: str | None) -> Path | None:
    """Where a run of ``config`` keeps its checkpoints: ``<root>/<config hash>``, the root being
    ``--checkpoint-dir``, else beside the tracking store; ``None`` (no checkpoints) with
    ``--checkpoint-every 0`` or with no store and no ``--checkpoint-dir``."""
    if config.checkpoint_every == 0:
        return None
    if config.checkpoint_dir:
        return Path(config.checkpoint_dir).expanduser() / config_hash
    return default_root(store_uri) / config_hash if store_uri else None


@dataclass(frozen=True)
class RunPlan:
    """What a run of ``config`` is, before anything is built. ``config``: validated, with the
    optimizer's ``lr`` and ``--opt-arg``s resolved (what is hashed and logged); after
    ``horizons.resolve_until`` its ``epochs`` are those the ``--until`` target set (the hash,
    params and checkpoint folder stay those of the config as given)."""

    config: RunConfig
    components: Mapping[str, Component]  # kind -> the one component of that kind the config names
    metrics: Mapping[str, Component]  # the metrics every run computes, then the config's own, in order
    options: Mapping[str, Any]  # the optimizer's options, typed: declared defaults, then --opt-arg
    clock: str  # the optimizer's declared clock convention (training.clocks)
    rule: StepRule  # how its steps count on the clocks, as declared
    config_hash: str  # what identifies the run (sweep cells, checkpoint folders, leases)
    params: Mapping[str, Any]  # the config as MLflow params, with the clock convention
    store_uri: str | None = None  # the tracking store, resolved; None: not tracked
    checkpoints: Path | None = None  # the run's checkpoint folder; None: it keeps none

    @property
    def optimizer(self) -> Component:
        return self.components["optimizer"]

    def with_epochs(self, epochs: int) -> RunPlan:
        return dataclasses.replace(self, config=dataclasses.replace(self.config, epochs=int(epochs)))

    def at(self, store_uri: str | None) -> RunPlan:
        """The plan of this run tracked in ``store_uri`` (resolved): its checkpoints go beside it."""
        folder = checkpoint_folder(self.config, self.config_hash, store_uri)
        return dataclasses.replace(self, store_uri=store_uri, checkpoints=folder)


def plan_run(config: RunConfig, registry: Registry, store_uri: str | None = None) -> RunPlan:
    """The ``RunPlan`` of ``config``: every value checked, every component looked up once (an
    unknown name raises as ``config.validate`` would), the optimizer's settings resolved.
    ``store_uri``: the resolved tracking store the run writes to (its checkpoints go beside it)."""
    config = validate(config)
    components: dict[str, Component] = {}
    named: dict[str, Component] = {}
    for kind in KINDS:  # the order validate checks them in: the same error for the same config
        value = getattr(config, kind.field)
        for name in value if kind.many else (value,):
            found = Component(*registry.lookup(kind.name, name))
            if kind.many:
                named[name] = found
            else:
                components[kind.name] = found
    metrics = {
        name: named[name] if name in named else Component(*registry.lookup("metric", name))
        for name in dict.fromkeys([*registry.defaults("metric"), *config.metrics])
    }
    optimizer = components["optimizer"]
    defaults = optimizer.spec.declared_defaults(optimizer.variant)
    config, options = optimizer_options.settle(config, optimizer.spec, defaults)
    clock = check_convention(optimizer.spec.declared_clock(optimizer.variant) or DEFAULT_CONVENTION, config.opt)
    momentum = float(config.momentum)
    dampening = float(options.get("dampening", 0.0) or 0.0) if momentum else 0.0
    shrink = (config.l2 if config.l2 > 0 else 0.0) + config.weight_decay
    config_hash = config.config_hash()
    params = {**config_params(config, config_hash), "clock_convention": f"{clock}: {CONVENTIONS[clock]}"}
    return RunPlan(
        config,
        MappingProxyType(components),
        MappingProxyType(metrics),
        MappingProxyType(options),
        clock,
        StepRule(float(config.lr), clock, momentum, dampening, shrink),
        config_hash,
        MappingProxyType(params),
    ).at(store_uri)
