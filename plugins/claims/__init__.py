"""The paper's claims and presets, as a plugin: its twelve claims and its control
(``declared.py``: statements, margins, what each declares; ``paper.py``: the evaluators) and its
sweep presets (``presets/*.toml``, ``initmem sweep --preset NAME``).

Loaded like any plugin (the ``claims`` entry point); ``INITMEM_LOAD_PLUGINS`` without ``claims``
leaves it out, and a report then evaluates only the other plugins' claims.
"""

from __future__ import annotations

import dataclasses
from importlib import resources

from initmem_core import hookimpl
from initmem_core.sweep.presets import register_folder
from initmem_plugins.claims.declared import DECLARED, STATEMENTS


@hookimpl
def initmem_register_claims(register):
    for name, statement in STATEMENTS.items():
        register(name, f"initmem_plugins.claims.paper:{name}", statement, **dataclasses.asdict(DECLARED[name]))


@hookimpl
def initmem_register_presets(register):
    register_folder(register, resources.files(__name__) / "presets")
