"""The kinds of component a run is made of: the one table everything else reads.

Each kind names its hook (``hookspecs``), the ``RunConfig`` field that selects it, the command-line
flag of that field, and the contract its factory follows (``initmem_core.contracts``). The config,
the CLI options, the plugin loader, the contract checks, ``initmem new-plugin``'s scaffold and the
hook reference in docs/plugins.md all read this table; nothing restates it.
"""

from __future__ import annotations

from dataclasses import dataclass

from initmem_core.errors import ConfigError, did_you_mean


@dataclass(frozen=True)
class ComponentKind:
    name: str  # what users call it: "optimizer"
    hook: str  # the hook that registers it: "initmem_register_optimizers"
    field: str  # the RunConfig field that selects it: "opt" ("" for the report's kinds: no run selects them)
    flag: str  # that field's command-line flag: "--opt"
    contract: str  # the factory's protocol in initmem_core.contracts: "OptimizerFactory"
    many: bool = False  # the field holds several names (metrics)


#: The kinds a run is built of, in the order ``initmem plugins`` lists them.
KINDS: tuple[ComponentKind, ...] = (
    ComponentKind("architecture", "initmem_register_architectures", "arch", "--arch", "ArchitectureFactory"),
    ComponentKind("optimizer", "initmem_register_optimizers", "opt", "--opt", "OptimizerFactory"),
    ComponentKind("initializer", "initmem_register_initializers", "init", "--init", "InitializerFactory"),
    ComponentKind("regularizer", "initmem_register_regularizers", "reg", "--reg", "RegularizerFactory"),
    ComponentKind("metric", "initmem_register_metrics", "metrics", "--metric", "MetricFactory", many=True),
    ComponentKind("dataset", "initmem_register_datasets", "data", "--data", "DatasetFactory"),
)

#: The kinds a sweep and its report read, which no run selects: claims (each registered claim is
#: evaluated on every sweep's report), presets (sweep files, ``initmem sweep --preset NAME``), figures
#: (each drawn into every report's folder and onto the parent run), executors (where a sweep's
#: cells run, ``initmem sweep --executor NAME``) and commands (``initmem NAME``).
REPORT_KINDS: tuple[ComponentKind, ...] = (
    ComponentKind("claim", "initmem_register_claims", "", "", "ClaimEvaluator"),
    ComponentKind("preset", "initmem_register_presets", "", "--preset", ""),
    ComponentKind("figure", "initmem_register_figures", "", "", "FigureFactory"),
    ComponentKind("executor", "initmem_register_executors", "", "--executor", "ExecutorFactory"),
    ComponentKind("command", "initmem_register_commands", "", "", "CommandFunction"),
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
