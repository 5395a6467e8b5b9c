"""Presets: sweep files a plugin provides (``hookspecs.initmem_register_presets``), each with a
comment on why each value was chosen: ``initmem presets show NAME > sweep.toml`` gives a copy to
edit and run with ``--config``. The paper's are the plugin ``claims``' package data."""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from initmem_core.errors import ConfigError, did_you_mean
from initmem_core.plugin_system.loader import get_registry

#: The kind presets register as (``kinds.REPORT_KINDS``).
PRESET = "preset"


def register_folder(register: Callable[..., Any], folder: Traversable) -> None:
    """Register every ``*.toml`` in ``folder`` (a package's data: ``importlib.resources.files(...)``)
    as a preset named by its file, described by its opening comment."""
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            name = entry.name[: -len(".toml")]
            register(name, str(entry), opening_comment(name, entry.read_text()))


def preset_names() -> list[str]:
    return get_registry().names(PRESET)


def preset_text(name: str) -> str:
    """The preset's sweep file, comments included."""
    names = preset_names()
    if name not in names:
        valid = ", ".join(sorted(names)) if names else "none (the plugin 'claims' has the paper's)"
        raise ConfigError(f"unknown preset '{name}'{did_you_mean(name, names)}; valid presets: {valid}")
    return Path(str(get_registry().lookup(PRESET, name)[0].factory)).read_text()


def opening_comment(name: str, text: str) -> str:
    """A sweep file's opening comment, to the end of its first sentence, without ``# name:``."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
        if lines[-1].endswith("."):
            break
    text = " ".join(lines)
    return text.split(":", 1)[1].strip() if text.startswith(f"{name}:") else text


def preset_description(name: str) -> str:
    """What the preset is for: its registered description, else its file's opening comment."""
    text = preset_text(name)
    return get_registry().lookup(PRESET, name)[0].description or opening_comment(name, text)


def preset_spec(name: str):
    """The preset as a ``SweepSpec``, parsed exactly as ``--config`` would parse the file."""
    from initmem_core.sweep.grid import spec_from_toml  # lazy: the plugin registering presets imports this module

    preset_text(name)  # a clear error for an unknown name
    return spec_from_toml(Path(str(get_registry().lookup(PRESET, name)[0].factory)))
