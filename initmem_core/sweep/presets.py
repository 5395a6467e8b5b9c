"""The paper as presets: sweep files shipped with initmem (``initmem_core/presets/*.toml``).

Each preset is a plain sweep file with a comment on why each value was chosen, so
``initmem presets show NAME > sweep.toml`` gives a user a copy to edit and run with ``--config``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from initmem_core.errors import ConfigError, did_you_mean
from initmem_core.sweep.grid import spec_from_toml

_FOLDER = resources.files(__package__) / "presets"


def preset_names() -> list[str]:
    return sorted(entry.name[: -len(".toml")] for entry in _FOLDER.iterdir() if entry.name.endswith(".toml"))


def preset_text(name: str) -> str:
    """The preset's sweep file, comments included."""
    if name not in preset_names():
        raise ConfigError(
            f"unknown preset '{name}'{did_you_mean(name, preset_names())}; "
            f"valid presets: {', '.join(sorted(preset_names()))}"
        )
    return (_FOLDER / f"{name}.toml").read_text()


def preset_description(name: str) -> str:
    """The file's opening comment up to the end of the sentence its first line begins (a sentence
    may run onto the next lines), without the ``# name:`` prefix."""
    lines = []
    for line in preset_text(name).splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
        if lines[-1].endswith("."):
            break
    text = " ".join(lines)
    return text.split(":", 1)[1].strip() if text.startswith(f"{name}:") else text


#: The comment line that opens a preset's statement of power: what its seeds give the claim it serves.
POWER = "# power:"


def preset_power(name: str) -> str:
    """The preset's statement of the power its seeds give the claim it serves (docs/STATISTICS.md's
    calibration): its ``# power:`` comment, to the end of its sentence, as ``initmem presets show`` prints it."""
    lines: list[str] = []
    found = False
    for line in preset_text(name).splitlines():
        if line.startswith(POWER):
            found = True
            line = line[len(POWER) :]
        elif not found:
            continue
        if not line.startswith("#") and lines:
            break
        lines.append(line.lstrip("# ").strip())
        if lines[-1].endswith("."):
            break
    return " ".join(lines)


def preset_spec(name: str):
    """The preset as a ``SweepSpec``, parsed exactly as ``--config`` would parse the file."""
    with resources.as_file(_FOLDER / f"{name}.toml") as path:
        preset_text(name)  # a clear error for an unknown name
        return spec_from_toml(Path(path))
