"""An environment in which some modules cannot be imported, as on a machine that lacks them:
``env = environment_without(folder, "mlflow")`` writes a ``sitecustomize`` into ``folder`` whose
import hook raises ModuleNotFoundError for those modules and their submodules, and returns
``os.environ`` with ``folder`` first on ``PYTHONPATH``. Every Python process started with it (and
every process those start, which inherit it) sees the modules as missing."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support import ROOT

SITECUSTOMIZE = """\\
import sys

BLOCKED = {blocked!r}


class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            blocker = "tests/support/blocked_imports.py"
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by {{blocker}})", name=name)
        return None


sys.meta_path.insert(0, Blocked())
"""


def environment_without(folder: Path, *modules: str) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=sorted(modules)))
    env = dict(os.environ)
    # The tree on the path too, as the device's command puts it (PYTHONPATH=$PWD): benchmarks.* imports.
    root = str(ROOT)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), root, env.get("PYTHONPATH")]))
    env.pop("INITMEM_LOAD_PLUGINS", None)
    return env


def command_without(folder: Path, modules: tuple[str, ...], argv: list[str]) -> list[str]:
    """``argv`` run through ``env`` with ``environment_without(folder, *modules)``'s PYTHONPATH: for
    commands started with the session's own environment."""
    env = environment_without(folder, *modules)
    return ["env", f"PYTHONPATH={env['PYTHONPATH']}", *argv]
