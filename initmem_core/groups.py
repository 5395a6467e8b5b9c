"""A sweep's groups and how they are named: a group's key (``group_label``), and within a sweep its
short label (``short_labels``), which every table, figure and the MLflow view show.

Cells that differ only in sigma and seed form a *group*: the report measures the spread of test
accuracy over sigma inside each group. A group's label names its optimizer and every hashed field
but sigma and seed that is not the default (``opt=lion,lr=0.001``), from the config alone, so the
same group has the same label in every sweep.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from initmem_core.config import DEFAULTS, FIELDS, HASHED, NAME_PREFIX, RunConfig, exact_text, setting_text, value_text

#: Within a group only these vary; every other varying field tells groups apart.
WITHIN_GROUP = ("sigma", "seed")


def group_fields(configs: Iterable[RunConfig]) -> list[str]:
    """Fields that tell groups apart: those that vary across ``configs``, except sigma and seed,
    and except execution knobs (threads, device: they change how, not what)."""
    configs = list(configs)
    return [
        name for name in HASHED if name not in WITHIN_GROUP and len({value_text(getattr(c, name)) for c in configs}) > 1
    ]


#: Always named in a group label, default or not: a label is never empty and says what trains.
#: (An unset lr, 0, is the optimizer's declared default, so ``opt`` alone says it.)
ALWAYS_LABELLED = ("opt",)


def group_label(config: RunConfig) -> str:
    """The label of ``config``'s group, from that config alone, e.g. ``opt=lion,lr=0.001``: the
    optimizer, then every hashed field except sigma and seed whose value is not the default.
    The same group has the same label in every sweep, and two groups that differ in anything
    but sigma and seed never share one (the UI groups by it across sweeps)."""
    # With an --until target, not epochs: the target sets them, --epochs only caps them (config_hash).
    named = [name for name in HASHED if name not in WITHIN_GROUP and not (name == "epochs" and config.until)]
    return ",".join(
        f"{name}={exact_text(getattr(config, name))}"
        for name in named
        if name in ALWAYS_LABELLED or getattr(config, name) != getattr(DEFAULTS, name)
    )


def group_keys(configs: Iterable[RunConfig]) -> list[str]:
    """Each config's ``group_label``: never shortened relative to the sweep."""
    return [group_label(config) for config in configs]


def label_parts(labels: list[str]) -> dict[str, list[str]]:
    """Each label (``group_label``) split into its ``field=value`` parts."""
    boundary = re.compile(",(?=(?:" + "|".join(map(re.escape, FIELDS)) + ")=)")  # a value may hold commas
    return {label: boundary.split(label) for label in labels}


def short_labels(keys: list[str]) -> tuple[dict[str, str], str]:
    """Each group key's (``group_label``) one short label, which the report's tables and JSON, the
    figures and the MLflow view name the group by, and what every group shares (said once): the
    settings that tell the groups apart as run names write them, one word a terminal never breaks
    (``adamw,lr=0.001`` beside ``sgd``; ``b=32``). A group at the default of what tells the others
    apart names it (``lr=default``, ``b=64``); one group alone is named by its optimizer."""
    if not keys:
        return {}, ""
    split = label_parts(keys)
    every = [set(parts) for parts in split.values()]
    shared = set.intersection(*every) if len(every) > 1 else {p for p in every[0] if _field(p) not in ALWAYS_LABELLED}
    told = {_field(p) for parts in every for p in parts if p not in shared}

    def text(name: str, value: object) -> str:
        return setting_text(name, value, "=") if value else f"{NAME_PREFIX.get(name, name)}=default"

    def label(parts: list[str]) -> str:
        own = [text(*p.split("=", 1)) if _field(p) in FIELDS else p for p in parts if p not in shared]
        return ",".join(own or [text(f, getattr(DEFAULTS, f)) for f in FIELDS if f in told])

    return {key: label(parts) or key for key, parts in split.items()}, ", ".join(
        p for p in split[keys[0]] if p in shared
    )


def _field(part: str) -> str:
    return part.partition("=")[0]


def metric_suffix(key: str) -> str:
    """A group key as MLflow accepts in a metric name: ``opt=sgd,batch_size=64`` -> ``opt-sgd.batch_size-64``."""
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", key.replace("=", "-").replace(",", "."))
