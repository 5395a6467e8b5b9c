"""The kinds of component a plugin registers: the one table everything else reads, and the record
of what each kind declares beside its factory.

Each kind names its hook (``hookspecs`` makes one per kind), the ``RunConfig`` field that selects
it, the command-line flag of that field, the contract its factory follows (an import string: the
protocols sit beside the types they name, ``initmem_core.contracts`` for a run's kinds) and its
info record, what ``register(name, factory, description, **declared)`` builds from ``declared``
(``ComponentSpec.info``). The config, the CLI options, the plugin loader, the registry, the hook
specs, ``initmem new-plugin``'s scaffold and the hook reference in docs/plugins.md all read this
table; nothing restates it. ``initmem_core.contracts`` re-exports the records.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initmem_core.errors import ConfigError, did_you_mean


def resolve(target: str) -> Any:
    """What an import string ``"package.module:attribute"`` names (the one place one is resolved)."""
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


# -- what each kind declares beside its factory ----------------------------------------------


@dataclass(frozen=True)
class ArchitectureInfo:
    """What an architecture declares beside its factory: ``fused``, the import string of
    ``f(models) -> module``, K of its built models as one module whose ``forward`` returns K x N x
    classes and whose ``split(tensors)`` gives its named tensors back as K state dicts of views in
    one model's names (what a lockstep sweep trains; undeclared: never fused)."""

    fused: str = ""


@dataclass(frozen=True)
class OptimizerInfo:
    """What an optimizer declares beside its factory (``register(name, factory, description,
    defaults=..., clock=...)``), in the manner of timm's ``OptimInfo``.

    ``defaults``: ``lr`` (what ``--lr`` left unset means; 0.05 when not declared) and every option
    ``--opt-arg key=value`` may set, with its default value, which gives the type a command-line
    value is read as (an unknown key is refused with the valid ones). ``clock``: how a step maps
    to the forgetting clocks: ``"heavy-ball"`` (the default), effective step
    ``lr * (1 - dampening) / (1 - momentum)``, for momentum that sums gradients (torch SGD);
    ``"lr"``, the step is ``lr``, for momentum that averages them (Adam, Lion, Muon) or none. The
    clocks count the declaration (``testing.check_optimizer`` checks the built optimizer agrees);
    the run logs it as ``clock_convention``. A family (``timm:*``) may give either as an import
    string of ``f(variant)``, resolved only when a run uses it. ``elementwise``: its update and
    state are per element, so one optimizer over K models' stacked parameters is K optimizers (a
    lockstep sweep fuses only such; undeclared: not fused)."""

    defaults: Mapping[str, Any] | str | None = None
    clock: str = ""
    elementwise: bool = False

    def declared_defaults(self, variant: str | None = None) -> dict[str, Any]:
        """The declared defaults (an import string is resolved here, not before)."""
        if self.defaults is None:
            return {}
        if isinstance(self.defaults, str):
            return dict(resolve(self.defaults)(variant))
        return dict(self.defaults)

    def declared_clock(self, variant: str | None = None) -> str:
        """The declared clock convention ("" when none), an import string resolved here."""
        return str(resolve(self.clock)(variant)) if ":" in self.clock else self.clock


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset declares beside its factory (``register(name, factory, description, shape=...,
    classes=..., splits=...)``), so that a run is planned and ``initmem sweep --dry-run`` sized
    without its files: ``shape``, (C, H, W) of an image; ``classes``; ``splits``, the (train,
    validation, test) examples of the whole dataset, as the factory builds them (``--train-size``
    cuts the first). ``--until`` finds a run's epochs from the training split when it is planned;
    left undeclared, the planning builds the dataset to count it (so a run reads its data twice),
    and the dry run to read them all. ``files``: (file name, md5) pairs that recognise the
    dataset's files (a name may repeat; a ``.gz`` file matches its own or its content's md5): a
    ``--data-dir`` holding files another dataset declares, and none of these, is refused."""

    shape: tuple[int, int, int] | None = None
    classes: int | None = None
    splits: tuple[int, int, int] | None = None
    files: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ClaimInfo:
    """What a claim declares beside its evaluator (``register(name, evaluate, statement, **info)``),
    shown by ``initmem plugins`` and read by the core: ``axis``, the settings it compares (its
    strata hold everything else equal); ``quantities``, what it decides on, in words; ``margin``,
    the margin fixed before any run, in words; ``clock`` and ``threshold``, the clock its mechanism
    needs (``clock_sgd``, ``clock_l2``, ``clock_adapt``) and the value it must reach before the
    claim can be contradicted (empty clock: none, a claim that memory is kept; no threshold:
    ``report.regime.CLOCK_THRESHOLDS``); ``source``, the paper or note it tests."""

    axis: tuple[str, ...] = ()
    quantities: str = ""
    margin: str = ""
    clock: str = ""
    threshold: float | None = None
    source: str = ""


@dataclass(frozen=True)
class FigureInfo:
    """What a figure declares beside its factory (``register(name, draw, description, file=...,
    warm_up=...)``): ``file``, its file name in the report's folder and under the parent run's
    ``report/`` (default ``<name>.png``), which the parent run's description links without drawing
    it; ``warm_up``, an import string of a function without arguments that loads what drawing needs
    (its library, fonts), which a sweep calls once while its cells train so that the report at the
    end does not wait for it (the built-in figures share ``initmem_plugins.figures.canvas:warm_up``)."""

    file: str = ""
    warm_up: str = ""

    def __post_init__(self) -> None:
        if self.file and (Path(self.file).name != self.file or self.file.startswith(".")):
            raise ValueError(f"file must be a plain file name, not {self.file!r}")

    def file_for(self, name: str) -> str:
        """The file a figure registered as ``name`` is written to."""
        return self.file or f"{name}.png"


@dataclass(frozen=True)
class ExecutorInfo:
    """What an executor declares beside its factory (``register(name, factory, description, needs=...,
    install=..., options=...)``), read before it is built: ``needs``, the optional packages it imports
    (import names), of which a missing one is refused in one line with ``install``, the command that
    installs them; ``options``, the executor options its factory takes, by keyword (``workers``,
    ``address``, ``cpus_per_cell``...: ``initmem sweep``'s executor flags), another given to it
    refused before anything runs."""

    needs: tuple[str, ...] = ()
    install: str = ""
    options: tuple[str, ...] = ()


# -- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ComponentKind:
    name: str  # what users call it: "optimizer"
    field: str  # the RunConfig field that selects it: "opt" ("" for the report's kinds: no run selects them)
    flag: str  # that field's command-line flag: "--opt"
    contract: str  # the import string of the factory's protocol: "initmem_core.contracts:OptimizerFactory"
    info: type | None = None  # its record of what it declares; None: it declares nothing
    many: bool = False  # the field holds several names (metrics)

    @property
    def hook(self) -> str:
        """The hook that registers it: ``initmem_register_optimizers``."""
        return f"initmem_register_{self.name}s"


RUN = "initmem_core.contracts:"
#: The kinds a run is built of, in the order ``initmem plugins`` lists them.
KINDS: tuple[ComponentKind, ...] = (
    ComponentKind("architecture", "arch", "--arch", RUN + "ArchitectureFactory", ArchitectureInfo),
    ComponentKind("optimizer", "opt", "--opt", RUN + "OptimizerFactory", OptimizerInfo),
    ComponentKind("initializer", "init", "--init", RUN + "InitializerFactory"),
    ComponentKind("regularizer", "reg", "--reg", RUN + "RegularizerFactory"),
    ComponentKind("metric", "metrics", "--metric", RUN + "MetricFactory", many=True),
    ComponentKind("dataset", "data", "--data", RUN + "DatasetFactory", DatasetInfo),
)

#: The kinds a sweep and its report read, which no run selects: claims (each registered claim is
#: evaluated on every sweep's report), presets (sweep files, ``initmem sweep --preset NAME``), figures
#: (each drawn into every report's folder and onto the parent run), executors (where a sweep's
#: cells run, ``initmem sweep --executor NAME``) and commands (``initmem NAME``).
REPORT_KINDS: tuple[ComponentKind, ...] = (
    ComponentKind("claim", "", "", "initmem_core.report.claims:ClaimEvaluator", ClaimInfo),
    ComponentKind("preset", "", "--preset", ""),
    ComponentKind("figure", "", "", "initmem_core.report.figures:FigureFactory", FigureInfo),
    ComponentKind("executor", "", "--executor", "initmem_core.sweep.executor:ExecutorFactory", ExecutorInfo),
    ComponentKind("command", "", "", RUN + "CommandFunction"),
)
#: Every kind a plugin may register, in the order ``initmem plugins`` lists them.
PLUGIN_KINDS = KINDS + REPORT_KINDS

BY_NAME = {kind.name: kind for kind in PLUGIN_KINDS}
BY_FIELD = {kind.field: kind for kind in KINDS}
KIND_NAMES = tuple(BY_NAME)


def kind_named(name: str) -> ComponentKind:
    """The kind called ``name``; a ``ConfigError`` listing the valid kinds otherwise."""
    if name not in BY_NAME:
        raise ConfigError(
            f"unknown kind '{name}'{did_you_mean(name, list(BY_NAME))}; valid kinds: {', '.join(sorted(BY_NAME))}"
        )
    return BY_NAME[name]


def flag_for(field: str) -> str:
    """The command-line flag of a ``RunConfig`` field: a kind's own flag (``metrics`` is
    ``--metric``), else the field name with dashes (``batch_size`` is ``--batch-size``)."""
    kind = BY_FIELD.get(field)
    return kind.flag if kind else "--" + field.replace("_", "-")
