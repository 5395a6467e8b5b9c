"""A run's plan: everything a run derives from its config, the registry and its store, worked out
once (``plan_run``; docs/ARCHITECTURE.md, "The flow of a run", says what it holds and who reads
it). The setup, the runner, the sweep and ``training.horizons`` read the ``RunPlan``; none derives
these again. Imports no torch, except to build a dataset that declares no sizes, which
``--until`` then reads here once to count it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from initmem_core.config import RunConfig, validate
from initmem_core.errors import ConfigError
from initmem_core.kinds import KINDS
from initmem_core.plugin_system import optimizer_options
from initmem_core.plugin_system.registry import ComponentSpec, Registry
from initmem_core.training import horizons
from initmem_core.training.checkpoint_store import default_root
from initmem_core.training.clocks import CONVENTIONS, DEFAULT_CONVENTION, UNDECLARED, StepRule, check_convention
from initmem_core.training.data_files import check_data_dir
from initmem_core.vocabulary import CONFIG_HASH_TAG


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


def arch_options(config: RunConfig, architecture: Component) -> dict[str, Any]:
    """``--arch-arg``s as the architecture's factory takes them, each value a JSON literal (true,
    3, 0.1) or else text: one its signature does not take (a factory with ``**kwargs``, timm's,
    checks its own) or that initmem sets from the dataset is a ``ConfigError``."""
    options = optimizer_options.split_opt_args(config.arch_arg, "--arch-arg", "drop_rate=0.1")
    names = inspect.signature(architecture.spec.load_factory()).parameters if options else {}
    contract = {"in_channels", "num_classes", "image_size"}
    taken = None if any(p.kind is p.VAR_KEYWORD for p in names.values()) else set(names) - {"variant", *contract}
    for key in options:
        if key in contract or (taken is not None and key not in taken):
            why = f"it takes {', '.join(sorted(taken or ())) or 'none'}" if key not in contract else "initmem sets it"
            raise ConfigError(f"--arch-arg {key}: architecture {config.arch} does not take it: {why}")
    return {key: literal(value) for key, value in options.items()}


def literal(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (bool, int, float)) else text


def checkpoint_folder(config: RunConfig, config_hash: str, store_uri: str | None) -> Path | None:
    """Where a run of ``config`` keeps its checkpoints: ``<root>/<config hash>``, the root being
    ``--checkpoint-dir``, else beside the tracking store; ``None`` (no checkpoints) with
    ``--checkpoint-every 0`` or with no store and no ``--checkpoint-dir``."""
    if config.checkpoint_every == 0:
        return None
    if config.checkpoint_dir:
        return Path(config.checkpoint_dir).expanduser() / config_hash
    return default_root(store_uri) / config_hash if store_uri else None


def training_set_size(config: RunConfig, dataset: Component) -> int:
    """How many examples a run of ``config`` trains on: the training split its dataset plugin
    declares (``contracts.DatasetInfo.splits``), cut to ``--train-size`` as every loader cuts it
    (the first N; a larger N fails when the data is built), else counted in the dataset built here."""
    declared = dataset.spec.info.splits
    if declared is None:
        try:
            return len(dataset.build(config=config).train_y)
        except ConfigError:  # the dataset's own one line (a bad --train-size, its files missing)
            raise
        except Exception as error:
            raise ConfigError(
                f"--until needs the size of the training set of {config.data}, which its plugin does not "
                f"declare (register it with splits=(train, val, test)) and which cannot be read here: {error}"
            ) from error
    return min(declared[0], config.train_size) if config.train_size else declared[0]


@dataclass(frozen=True)
class RunPlan:
    """What a run of ``config`` is, before anything is built. ``config``: validated, with the
    optimizer's ``lr`` and ``--opt-arg``s resolved: what is hashed and logged, a sweep's cell;
    ``trains``: the config the run trains, the same but for the ``epochs`` an ``--until`` target
    sets (``n_train``: the training set's size they were found for; with ``--patience``: the cap)."""

    config: RunConfig
    components: Mapping[str, Component]  # kind -> the one component of that kind the config names
    metrics: Mapping[str, Component]  # the metrics every run computes, then the config's own, in order
    options: Mapping[str, Any]  # the optimizer's options, typed: declared defaults, then --opt-arg
    clock: str  # the optimizer's declared clock convention (training.clocks)
    rule: StepRule  # how its steps count on the clocks, as declared
    config_hash: str  # what identifies the run (sweep cells, checkpoint folders, leases)
    params: Mapping[str, Any]  # the config as MLflow params, with the clock convention
    trains: RunConfig  # ``config`` with --until's epochs (``config`` itself without --until)
    n_train: int | None = None  # with --until: the training examples its epochs were found for
    store_uri: str | None = None  # the tracking store, resolved; None: not tracked
    checkpoints: Path | None = None  # the run's checkpoint folder; None: it keeps none
    min_epochs: int = 0  # with --patience and --until: no stop before this epoch
    arch_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # --arch-arg: the model's keywords
    name: str = ""  # the run's name, of the config as given (``RunConfig.run_name``: lr when set, not resolved)

    @property
    def optimizer(self) -> Component:
        return self.components["optimizer"]

    @property
    def convention(self) -> str:
        """The clock convention its run logs, as a report reads it back: ``clock``, or ``UNDECLARED``."""
        return self.params["clock_convention"].partition(":")[0]

    def at(self, store_uri: str | None) -> RunPlan:
        """The plan of this run tracked in ``store_uri`` (resolved): its checkpoints go beside it."""
        folder = checkpoint_folder(self.config, self.config_hash, store_uri)
        return dataclasses.replace(self, store_uri=store_uri, checkpoints=folder)


def plan_run(config: RunConfig, registry: Registry, store_uri: str | None = None) -> RunPlan:
    """The ``RunPlan`` of ``config``: every value checked, every component looked up once (an
    unknown name raises as ``config.validate`` would), the optimizer's settings resolved, the
    ``--until`` horizon found (``ConfigError`` when the cap is too short or the target out of reach).
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
    if config.data_dir:  # another dataset's files, refused before anything is built or tracked
        check_data_dir(config.data, config.data_dir, registry.components.get("dataset", {}))
    metrics = {
        name: named[name] if name in named else Component(*registry.lookup("metric", name))
        for name in dict.fromkeys([*registry.defaults("metric"), *config.metrics])
    }
    optimizer = components["optimizer"]
    defaults = optimizer.spec.info.declared_defaults(optimizer.variant)
    name, (config, options) = config.run_name(), optimizer_options.settle(config, optimizer.spec, defaults)
    declared = optimizer.spec.info.declared_clock(optimizer.variant)
    clock = check_convention(declared or DEFAULT_CONVENTION, config.opt)
    momentum = float(config.momentum)
    dampening = float(options.get("dampening", 0.0) or 0.0) if momentum else 0.0
    shrink = (config.l2 if config.l2 > 0 else 0.0) + config.weight_decay
    rule = StepRule(float(config.lr), clock, momentum, dampening, shrink)
    config_hash = config.config_hash()
    convention = f"{clock}: {CONVENTIONS[clock]}"
    convention = convention if declared else f"{UNDECLARED}: counted as {convention}"
    params = {**config_params(config, config_hash), "clock_convention": convention}
    trains, n_train, min_epochs = config, None, 0
    if config.until:  # the epochs follow from the training set's size, the schedule and the rule
        n_train = training_set_size(config, components["dataset"])
        until = horizons.horizon(config, n_train, rule)
        trains, min_epochs = dataclasses.replace(config, epochs=until.epochs), until.min_epochs
    return RunPlan(
        config,
        MappingProxyType(components),
        MappingProxyType(metrics),
        MappingProxyType(options),
        clock,
        rule,
        config_hash,
        MappingProxyType(params),
        trains,
        n_train,
        min_epochs=min_epochs,
        arch_options=MappingProxyType(arch_options(config, components["architecture"])),
        name=name,
    ).at(store_uri)


def plan_horizons(plans: Sequence[RunPlan]) -> list[horizons.Horizon | None]:
    """Each plan's ``Horizon`` (a sweep plan's ``plans``), each dataset sized once: a cell with an
    ``--until`` target, for the size its plan found its epochs for (``plan_run`` raised already if
    it could not); one without, for its declared size, or ``None`` when its dataset declares none
    and cannot be read here."""
    sizes: dict[tuple[Any, ...], int | Exception] = {}
    found: list[horizons.Horizon | None] = []
    for plan in plans:
        config = plan.config
        data = (config.data, config.data_dir, config.train_size, config.data_seed)
        if plan.n_train is not None:  # --until: the plan found its epochs for this size
            sizes[data] = plan.n_train
        if data not in sizes:
            try:
                sizes[data] = training_set_size(config, plan.components["dataset"])
            except Exception as error:  # a dataset that cannot be read here (CIFAR elsewhere, say)
                sizes[data] = error
        size = sizes[data]
        found.append(None if isinstance(size, Exception) else horizons.horizon(config, size, plan.rule))
    return found
