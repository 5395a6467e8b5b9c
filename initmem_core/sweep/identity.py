"""A sweep's identity: its name is bound to the grid it was launched with.

A relaunch is how a sweep resumes, so it must tell a resume (the same grid) from another sweep
given the same name. The digest of the cells' config hashes goes on the parent run (tag
``initmem.grid``); a relaunch whose digest the parent does not hold is refused in one line, before
anything is written, unless ``--extend`` adds its cells on purpose."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from initmem_core.config import HASHED, RunConfig
from initmem_core.errors import ConfigError
from initmem_core.tracking.sweep_runs import PARAM_VALUE_LIMIT
from initmem_core.vocabulary import GRID_TAG


def _param_text(value: Any) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(value)


def held_digests(tags: Mapping[str, str]) -> list[str]:
    """The grid digests a parent run holds (none on a sweep launched before identities)."""
    return [d for d in tags.get(GRID_TAG, "").split(",") if d]


@dataclass(frozen=True)
class GridIdentity:
    """What a launch's grid is: its digest, 12 hex digits naming the set of the cells' config
    hashes (order and repeats aside), and its values as the parent run's params hold them: each
    hashed field's values in cell order, and the number of cells."""

    digest: str
    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, cells: list[RunConfig]) -> GridIdentity:
        hashes = sorted({config.config_hash() for config in cells})
        values = {name: ",".join(dict.fromkeys(_param_text(getattr(c, name)) for c in cells)) for name in HASHED}
        return cls(hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:12], {**values, "cells": str(len(cells))})

    def differences(self, params: Mapping[str, str]) -> list[str]:
        """Each field whose values differ from the parent's params (the first launch's grid), as
        ``epochs 2 (this launch: 3)``; ``cells`` only when nothing else tells them apart."""
        differ = [
            f"{name} {params[name]} (this launch: {value[:PARAM_VALUE_LIMIT]})"
            for name, value in self.values.items()
            if name != "cells" and name in params and params[name] != value[:PARAM_VALUE_LIMIT]
        ]
        if not differ and params.get("cells", self.values["cells"]) != self.values["cells"]:
            differ = [f"cells {params['cells']} (this launch: {self.values['cells']})"]
        return differ

    def matches(self, tags: Mapping[str, str], params: Mapping[str, str]) -> bool:
        """Whether this launch resumes the sweep: its digest is one the parent holds, or, for a sweep
        launched before identities, its grid's values are the parent's params."""
        held = held_digests(tags)
        if held:
            return self.digest in held
        return not self.differences(params)  # which names the cells too when they alone differ

    def admit(self, name: str, tags: Mapping[str, str], params: Mapping[str, str], extend: bool) -> None:
        """``ConfigError`` (one line) unless this launch resumes sweep ``name`` or ``extend``s it."""
        if extend or self.matches(tags, params):
            return
        differ = self.differences(params)
        what = "; ".join(differ) if differ else "other cells"
        raise ConfigError(
            f"sweep '{name}' was launched with another grid ({what}); relaunch that grid to resume it, "
            f"give --name OTHER to start a new sweep, or add --extend to add this launch's cells to '{name}' on purpose"
        )

    def tag_value(self, tags: Mapping[str, str]) -> str:
        """The parent's ``initmem.grid`` once this launch is admitted: every grid it holds, this one included."""
        return ",".join(dict.fromkeys([*held_digests(tags), self.digest]))
