"""A sweep's grid: which values each config field takes, and the cells (validated configs) it spans.

Every field is an *axis*, a tuple of one value (fixed) or several (varying), from the command line
(``0.1,0.5,1``, or a range ``0.1:2.5:7``), a TOML sweep file or a Python mapping, converted with
``config.coerce`` so that a cell means exactly what a single ``initmem run`` would. Cells that differ
only in sigma and seed form a *group* (``initmem_core.groups``)."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from initmem_core.config import (
    FIELDS,
    HASHED,
    RunConfig,
    coerce,
    field_type,
    from_mapping,
    load_toml,
    unknown_key_error,
    validate,
)
from initmem_core.errors import ConfigError
from initmem_core.groups import DEFAULTS, WITHIN_GROUP, exact_text, group_keys, value_text
from initmem_core.kinds import flag_for
from initmem_core.plugin_system.loader import get_registry
from initmem_core.plugin_system.registry import Registry
from initmem_core.tracking.records import check_sweep_name
from initmem_core.training.plan import RunPlan, plan_run

T = TypeVar("T")


def parse_range(name: str, text: str) -> tuple[Any, ...]:
    """``start:stop:count``: ``count`` evenly spaced values, both ends included."""
    kind = field_type(name)
    if kind not in (int, float):
        raise ConfigError(f"{flag_for(name)} {text}: a range start:stop:count needs a numeric option")
    parts = text.split(":")
    if len(parts) != 3:
        raise ConfigError(f"{flag_for(name)} {text}: a range is start:stop:count, e.g. 0.1:2.5:7")
    start, stop = (coerce(name, part) for part in parts[:2])
    try:
        count = int(parts[2])
    except ValueError:
        count = 0
    if count < 2:
        raise ConfigError(f"{flag_for(name)} {text}: the count of a range must be a whole number of at least 2")
    values = [start + (stop - start) * i / (count - 1) for i in range(count)]
    if kind is int:
        if any(not float(v).is_integer() for v in values):
            raise ConfigError(
                f"{flag_for(name)} {text}: {count} evenly spaced values from {start} to {stop} "
                "are not all whole numbers; choose a count that divides the span, or list the values"
            )
        return tuple(int(v) for v in values)
    # 12 significant digits: 0.1:0.3:3 gives 0.2, not 0.20000000000000004 (names and hashes stay clean).
    return tuple(float(f"{v:.12g}") for v in values)


def parse_values(name: str, spec: Any) -> tuple[Any, ...]:
    """The values of one axis from CLI text (a comma list or a numeric range), a TOML value or a
    Python value. For a list-typed field (``metrics``) text is *one* value: vary it with a list of lists."""
    if name not in FIELDS:
        raise unknown_key_error(name, "the sweep")
    if isinstance(spec, str):
        text = spec.strip()
        if field_type(name) is tuple:
            items: Iterable[Any] = [text]
        elif ":" in text and field_type(name) in (int, float):
            return parse_range(name, text)
        else:
            items = [item.strip() for item in text.split(",")]
    elif isinstance(spec, (list, tuple)):
        items = spec
    else:
        items = [spec]
    values = tuple(coerce(name, item) for item in items)
    if not values or any(isinstance(v, str) and not v for v in values):
        raise ConfigError(f"{flag_for(name)} {spec!r}: give at least one value, with none empty")
    repeated = [v for i, v in enumerate(values) if v in values[:i]]
    if repeated:
        raise ConfigError(f"{flag_for(name)} {spec!r} lists {repeated[0]!r} more than once")
    return values


@dataclass(frozen=True)
class SweepSpec:
    """The axes of a sweep (field -> values), its name from a sweep file, and its ``groups``:
    alternative sets of fixed values (``[[groups]]``), each crossed with the axes, so that a sweep can
    be a union of grids (SGD at one rate, Adam at its own, over one sigma grid)."""

    axes: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    name: str | None = None
    groups: tuple[dict[str, Any], ...] = ()

    def override(self, other: SweepSpec) -> SweepSpec:
        """``other``'s axes replace this spec's for the same fields, in the groups too (CLI over file)."""
        groups = tuple({k: v for k, v in group.items() if k not in other.axes} for group in self.groups)
        return SweepSpec(
            {**self.axes, **other.axes},
            other.name or self._overridden_name(other),
            tuple(group for group in groups if group),
        )

    def _overridden_name(self, other: SweepSpec) -> str | None:
        """This spec's name with what ``other`` changes in the grid (``paper-mini+epochs=3``): a named
        sweep with overrides is another sweep."""
        if self.name is None:
            return None
        changes = []
        for key, values in other.axes.items():
            if key not in HASHED:
                continue  # --threads, --data-dir...: the same cells, the same sweep
            before = self.axes.get(key) or tuple(g[key] for g in self.groups if key in g) or (getattr(DEFAULTS, key),)
            if [exact_text(v) for v in dict.fromkeys(before)] != [exact_text(v) for v in values]:
                changes.append(f"{key}={','.join(exact_text(v) for v in values)}")
        if not changes:
            return self.name
        suffix = re.sub(r"[^\w.,=+:@ -]", "_", "+".join(changes))
        name = f"{self.name}+{suffix}"
        if len(name) > 200:  # a sweep name's limit: the changes as a digest
            name = f"{self.name}+{hashlib.sha256(suffix.encode()).hexdigest()[:8]}"
        return name

    def group_axes(self) -> list[dict[str, tuple[Any, ...]]]:
        """The product grids whose union is the sweep."""
        return [{**self.axes, **{k: (v,) for k, v in group.items()}} for group in self.groups] or [self.axes]

    @property
    def varying(self) -> list[str]:
        grids = self.group_axes()
        return [
            name
            for name in FIELDS
            if len({value_text(v) for grid in grids for v in grid.get(name, (getattr(DEFAULTS, name),))}) > 1
        ]


def spec_from_values(values: Mapping[str, Any], name: str | None = None) -> SweepSpec:
    """From CLI text or a Python mapping: ``{"sigma": "0.1:2.5:7", "opt": ["sgd", "adam"], "epochs": 5}``."""
    return SweepSpec({key: parse_values(key, value) for key, value in values.items()}, name)


def spec_from_toml(path: str | Path) -> SweepSpec:
    """A sweep file: optional ``name``, ``[base]`` fixed values, ``[grid]`` lists or ranges
    (``[execution]``, how it runs, is the command line's: ``cli/sweep_file.py``)."""
    for key in (data := load_toml(path)):
        if key not in ("name", "base", "grid", "groups", "execution"):
            raise ConfigError(f"unknown key '{key}' in {path}; it takes name, [base], [grid], [[groups]], [execution]")
    axes: dict[str, tuple[Any, ...]] = {}
    for table in ("base", "grid"):
        section = data.get(table, {})
        if not isinstance(section, dict):
            raise ConfigError(f"'{table}' in {path} must be a table, [{table}]")
        for key, value in section.items():
            if key not in FIELDS:
                raise unknown_key_error(key, f"[{table}] of {path}")
            if key in axes:
                raise ConfigError(f"'{key}' is in both [base] and [grid] of {path}; keep it in one")
            if table == "base":
                axes[key] = (_one_value(key, value, "[base]", path),)
            else:
                if not isinstance(value, (list, str)):
                    raise ConfigError(f"[grid] {key} in {path} must be a list or a range string 'start:stop:count'")
                axes[key] = parse_values(key, value)
    name = data.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ConfigError(f"'name' in {path} must be a non-empty string")
    return SweepSpec(axes, name.strip() if name else None, _groups_from_toml(data.get("groups", []), axes, path))


def _one_value(key: str, value: Any, table: str, path: str | Path) -> Any:
    """A fixed value of a sweep file's ``table``, coerced (a list there is a mistake, but for a list-typed field)."""
    if isinstance(value, (list, dict)) and field_type(key) is not tuple:
        raise ConfigError(f"{table} {key} in {path} must be one value; put lists in [grid]")
    return coerce(key, value)


def _groups_from_toml(groups: Any, axes: dict[str, tuple[Any, ...]], path: str | Path) -> tuple[dict[str, Any], ...]:
    if not isinstance(groups, list) or not all(isinstance(group, dict) for group in groups):
        raise ConfigError(f"'groups' in {path} must be an array of tables, [[groups]]")
    parsed = []
    for number, group in enumerate(groups, 1):
        values = {}
        for key, value in group.items():
            if key not in FIELDS:
                raise unknown_key_error(key, f"[[groups]] number {number} of {path}")
            if key in axes and len(axes[key]) > 1:
                raise ConfigError(f"'{key}' is in both [grid] and [[groups]] of {path}; keep it in one")
            values[key] = _one_value(key, value, "[[groups]]", path)
        parsed.append(values)
    return tuple(parsed)


def expand(spec: SweepSpec, registry: Registry | None = None) -> list[RunConfig]:
    """Every cell of the grid as a validated ``RunConfig`` (``ConfigError`` for a bad value); with a
    registry, each cell's config as its plan (``expand_plans``) will run it."""
    if registry is not None:
        return [plan.config for plan in expand_plans(spec, registry)]
    return _expanded(spec, validate, lambda config: config)


def expand_plans(spec: SweepSpec, registry: Registry) -> list[RunPlan]:
    """Every cell of the grid as its ``RunPlan``, made once, here."""
    return _expanded(spec, lambda config: plan_run(config, registry), lambda plan: plan.config)


def _expanded(spec: SweepSpec, make: Callable[[RunConfig], T], config_of: Callable[[T], RunConfig]) -> list[T]:
    made: list[T] = []
    seen: set[str] = set()
    for axes in spec.group_axes():
        # Group-defining fields vary slowest, then seed, then sigma: a group's cells run together.
        names = [n for n in FIELDS if n in axes and n not in WITHIN_GROUP]
        names += [n for n in ("seed", "sigma") if n in axes]
        for values in itertools.product(*(axes[n] for n in names)):
            config = from_mapping(dict(zip(names, values)), "the sweep")
            try:
                cell = make(config)
            except ConfigError as error:
                varying = ", ".join(f"{n}={getattr(config, n)}" for n in spec.varying)
                raise ConfigError(f"{error} (in the cell {varying})" if varying else str(error)) from None
            key = config_of(cell).config_hash()
            if key not in seen:  # two groups may share a cell
                seen.add(key)
                made.append(cell)
    return made


def cell_names(configs: list[RunConfig], varying: Iterable[str]) -> list[str]:
    """A unique run name per cell with every value that tells it apart in its sweep
    (``RunConfig.run_name``), e.g. ``resnet20-lion-lr0.001-s0.5-seed0`` (a config hash is
    appended on a clash)."""
    names = [config.run_name([n for n in HASHED if n in set(varying)]) for config in configs]
    counts = Counter(names)
    return [f"{n}-{c.config_hash()[:6]}" if counts[n] > 1 else n for n, c in zip(names, configs)]


def default_name(spec: SweepSpec) -> str:
    """A readable name, the same for the same grid (so a relaunch without ``--name`` resumes it),
    e.g. ``digits-resnet20-sigma-opt-3fa2b1``."""
    data, arch = (spec.axes.get(n, (getattr(DEFAULTS, n),)) for n in ("data", "arch"))
    hashed = {n: [value_text(v) for v in values] for n, values in sorted(spec.axes.items()) if n in HASHED}
    groups = [{n: value_text(v) for n, v in sorted(g.items()) if n in HASHED} for g in spec.groups]
    digest = hashlib.sha256(json.dumps([hashed, groups] if groups else hashed).encode()).hexdigest()[:6]
    varying = "-".join(spec.varying) or "single"
    prefix = "-".join(re.sub(r"[^A-Za-z0-9_.]", "_", "+".join(map(str, v))) for v in (data, arch))
    return f"{prefix}-{varying}-{digest}"


# -- the plan of a sweep ---------------------------------------------------------------------

#: Where a sweep's report files go, one folder per sweep name.
DEFAULT_OUTPUT = Path("initmem-output")


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep will run, known before anything runs: each cell's plan, group and run name, the
    sweep's name and output folder (``initmem sweep --dry-run`` prints it)."""

    spec: SweepSpec
    plans: list[RunPlan]  # each cell's plan (``training.plan``), made once
    groups: list[str]  # the group label of each cell
    name: str
    out: Path
    names: list[str] = field(default_factory=list)  # each cell's run name (``cell_names``)

    @property
    def cells(self) -> list[RunConfig]:
        """Each cell's config, as it will run (its plan's)."""
        return [plan.config for plan in self.plans]


def plan_sweep(
    spec: SweepSpec | Mapping[str, Any] | str | Path,
    *,
    name: str | None = None,
    out: str | Path | None = None,
    registry: Registry | None = None,
) -> SweepPlan:
    """Expand the grid and plan each cell (``ConfigError`` for a bad value or name), and settle
    the sweep's name (given, the file's, or generated) and output folder. ``spec``: a ``SweepSpec``,
    a mapping of field -> values (``{"sigma": [0.5, 1], "epochs": 5}``) or a TOML sweep file."""
    if not isinstance(spec, SweepSpec):
        spec = spec_from_toml(spec) if isinstance(spec, (str, Path)) else spec_from_values(spec)
    plans = expand_plans(spec, registry or get_registry())
    cells = [plan.config for plan in plans]
    # An empty --name is a mistake to report, not a request for the generated name.
    name = check_sweep_name(name if name is not None else spec.name or default_name(spec))
    return SweepPlan(
        spec,
        plans,
        group_keys(cells),
        name,
        Path(out) if out else DEFAULT_OUTPUT / name,
        cell_names(cells, spec.varying),
    )
