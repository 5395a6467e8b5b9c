"""A sweep's groups and how they are named, in one scheme: the report, the sweep and the CLI all
name a group by ``group_label``.

Cells that differ only in sigma and seed form a *group*: the report measures the spread of test
accuracy over sigma inside each group. A group's label names its optimizer and every hashed field
but sigma and seed that is not the default (``opt=lion,lr=0.001``), from the config alone, so the
same group has the same label in every sweep.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from initmem_core.config import FIELDS, HASHED, RunConfig

#: Within a group only these vary; every other varying field tells groups apart.
WITHIN_GROUP = ("sigma", "seed")

DEFAULTS = RunConfig()


def group_fields(configs: Iterable[RunConfig]) -> list[str]:
    """Fields that tell groups apart: those that vary across ``configs``, except sigma and seed,
    and except execution knobs (threads, device: they change how, not what)."""
    configs = list(configs)
    return [
        name for name in HASHED if name not in WITHIN_GROUP and len({value_text(getattr(c, name)) for c in configs}) > 1
    ]


def value_text(value: Any) -> str:
    """A value as group and cell names show it: a float to 6 significant digits, a tuple joined by ``+``."""
    if isinstance(value, tuple):
        return "+".join(value) or "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


#: Always named in a group label, default or not: a label is never empty and says what trains.
#: (An unset lr, 0, is the optimizer's declared default, so ``opt`` alone says it.)
ALWAYS_LABELLED = ("opt",)


def exact_text(value: Any) -> str:
    """A value as a group label shows it."""
    # 12 significant digits, not value_text's 6: lr 0.0010001 and 0.001 must not share a label.
    return f"{value:.12g}" if isinstance(value, float) else value_text(value)


def group_label(config: RunConfig) -> str:
    """The label of ``config``'s group, from that config alone, e.g. ``opt=lion,lr=0.001``: the
    optimizer, then every hashed field except sigma and seed whose value is not the default.
    The same group has the same label in every sweep, and two groups that differ in anything
    but sigma and seed never share one (the UI groups by it across sweeps)."""
    return ",".join(
        f"{name}={exact_text(getattr(config, name))}"
        for name in identity_fields(config)
        if name in ALWAYS_LABELLED or getattr(config, name) != getattr(DEFAULTS, name)
    )


def identity_fields(config: RunConfig) -> list[str]:
    """The hashed fields of ``config`` but sigma and seed; with an ``until`` target, not ``epochs``
    (the target sets them, ``--epochs`` only caps them: see ``RunConfig.config_hash``)."""
    return [name for name in HASHED if name not in WITHIN_GROUP and not (name == "epochs" and config.until)]


def group_keys(configs: Iterable[RunConfig]) -> list[str]:
    """Each config's ``group_label``: never shortened relative to the sweep."""
    return [group_label(config) for config in configs]


def label_parts(labels: list[str]) -> dict[str, list[str]]:
    """Each label (``group_label``) split into its ``field=value`` parts."""
    boundary = re.compile(",(?=(?:" + "|".join(map(re.escape, FIELDS)) + ")=)")  # a value may hold commas
    return {label: boundary.split(label) for label in labels}


def short_group_names(labels: list[str]) -> tuple[dict[str, str], str]:
    """Short names for figures and terminal tables, and what every group shares (for a caption):
    each label (``group_label``) keeps its optimizer and the parts that not every group has, so
    ``opt=sgd,lr=0.01,batch_size=128,epochs=40`` beside ``opt=adam,...,epochs=40`` reads
    ``opt=sgd,lr=0.01,batch_size=128``, with ``epochs=40`` shared."""
    split = label_parts(labels)
    shared = set.intersection(*(set(parts) for parts in split.values())) if len(split) > 1 else set()
    shared = {part for part in shared if part.split("=", 1)[0] not in ALWAYS_LABELLED}
    names = {label: ",".join(part for part in parts if part not in shared) for label, parts in split.items()}
    return names, ", ".join(part for part in split[labels[0]] if part in shared) if labels else ""


def metric_suffix(key: str) -> str:
    """A group key as MLflow accepts in a metric name: ``opt=sgd,batch_size=64`` -> ``opt-sgd.batch_size-64``."""
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", key.replace("=", "-").replace(",", "."))
