"""A sweep file's (or preset's) ``[execution]`` table: how its cells run, not which cells there
are, so no part of the sweep's identity. It sets executor options, under the names their factories
take (``sweep.EXECUTOR_FLAGS``); the command line's flags override it, and ``--config``'s file a
preset's. An option the chosen executor does not take is left out with one warning, so a preset
still runs on an executor that lacks one (the built-in local, Ray and Slurm executors all take
``lockstep``: each fused job is one worker's job, Ray task or Slurm array task).

    [execution]
    lockstep = true      # or "auto", "on", "off": --lockstep
    lockstep_max = 4     # --lockstep-max
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from initmem_core.config import load_toml
from initmem_core.errors import ConfigError, InitmemError, RunWarning
from initmem_core.sweep.presets import PRESET

#: What ``[execution]`` may set, each option's accepted types and how a mistake is told.
OPTIONS: dict[str, tuple[tuple[type, ...], str]] = {
    "lockstep": ((bool, str), 'true, false, "auto", "on" or "off"'),
    "lockstep_max": ((int,), "a whole number of models, 2 or more"),
}


def execution_table(path: str | Path) -> dict[str, Any]:
    """The ``[execution]`` options of the sweep file at ``path`` (``{}``: none), checked."""
    table = load_toml(path).get("execution", {})
    if not isinstance(table, dict):
        raise ConfigError(f"'execution' in {path} must be a table, [execution]")
    for key, value in table.items():
        if key not in OPTIONS:
            raise ConfigError(f"unknown key '{key}' in [execution] of {path}; it takes {', '.join(OPTIONS)}")
        types, told = OPTIONS[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ConfigError(f"[execution] {key} in {path} must be {told}, got {value!r}")
    return table


def with_file_options(
    given: dict[str, Any], preset: str | None, config: Path | None, executor: str, registry: Any
) -> dict[str, Any]:
    """``given`` (the command line's executor options, ``None`` where not given) with what the
    preset's sweep file, then ``--config``'s, set where the command line did not; an option the
    executor does not take (those it declares: ``contracts.ExecutorInfo.options``) is left out
    with a warning."""
    files = [Path(str(registry.lookup(PRESET, preset)[0].factory))] if preset else []
    files += [config] if config else []
    try:
        taken = registry.lookup("executor", executor)[0].info.options
    except InitmemError:  # an unknown executor: make_executor says so in one line
        return given
    merged = dict(given)
    for path in files:
        for key, value in execution_table(path).items():
            if key not in taken:
                warnings.warn(
                    f"[execution] {key} in {path} is left out: --executor {executor} does not take it",
                    RunWarning,
                    stacklevel=2,
                )
            elif given.get(key) is None:
                merged[key] = value
    return merged
