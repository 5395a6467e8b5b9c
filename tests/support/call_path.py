"""Where a run's config travels: the calls that carry it, followed through initmem's modules.

``trace(fn)`` runs ``fn`` under ``sys.setprofile`` and records every call into a first-party module
(``initmem_core``, ``initmem_plugins``) one of whose arguments is a ``RunConfig`` or a ``RunPlan``.
A call *enters* a module when its nearest first-party caller is in another module. ``Path``
counts, per module, those entries; how many came *back* to a module the config had entered before
(any entry after a module's first); and how many *climbed* from a core layer to a higher one (the layers of
``tests/core/test_architecture.py``; a call from the core into a plugin's factory is the registry at
work, not a climb).

``python -m tests.support.call_path`` follows one small run from ``build_setup`` and from ``run`` and
writes the figures into docs/ARCHITECTURE.md between its markers; ``tests/core/training/test_plan.py``
holds its limits (from ``build_setup`` the plan goes straight down: it enters
neither ``optimizer_options`` nor ``horizons`` and comes back to no module it left).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from initmem_core.config import RunConfig
from initmem_core.training.plan import RunPlan
from tests.core.test_architecture import _layer
from tests.support import ROOT

FIRST_PARTY = ("initmem_core", "initmem_plugins")
DOCS = ROOT / "docs" / "ARCHITECTURE.md"
BEGIN, END = "<!-- call-path:begin -->", "<!-- call-path:end -->"


@dataclass
class ConfigPath:
    """The calls that carried a run's config, counted."""

    entries: Counter[str] = field(default_factory=Counter)  # module -> calls entering it
    returns: int = 0  # entries into a module entered before
    climbs: int = 0  # entries from a core layer into a higher core layer

    def entered(self, module: str) -> int:
        """Entries into ``module`` given by its last dotted part or in full."""
        return sum(n for name, n in self.entries.items() if name == module or name.endswith("." + module))


def _module(frame: FrameType | None) -> str | None:
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name if name.split(".")[0] in FIRST_PARTY else None


def _carries_config(frame: FrameType) -> bool:
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return any(isinstance(frame.f_locals.get(name), (RunConfig, RunPlan)) for name in names)


def trace(fn: Callable[[], Any]) -> ConfigPath:
    """Run ``fn`` and count the calls that carried a config through first-party modules."""
    path = ConfigPath()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        module = _module(frame)
        if module is None or not _carries_config(frame):
            return
        caller = frame.f_back
        while caller is not None and _module(caller) is None:
            caller = caller.f_back
        if caller is None:
            return
        came_from = _module(caller)
        if came_from == module:
            return
        path.returns += module in path.entries
        path.entries[module] += 1
        core = [m for m in (came_from, module) if m and m.startswith("initmem_core")]
        if len(core) == 2 and _layer(module) > _layer(came_from):  # type: ignore[arg-type]
            path.climbs += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(previous)
    return path


TINY = dict(data="synthetic:1x8x8-c4-n64", arch="resnet20", epochs=1, batch_size=32, device="cpu", threads=1)


def from_build_setup(**values: Any) -> ConfigPath:
    """The path of a tiny run's config from ``build_setup`` (its plan made first, outside)."""
    from initmem_core.plugin_system.loader import load_registry
    from initmem_core.training.plan import plan_run
    from initmem_core.training.setup import build_setup, process_settings_kept

    plan = plan_run(RunConfig(**{**TINY, **values}), load_registry(entry_points=False))
    with process_settings_kept():  # build_setup sets threads and determinism for the process
        return trace(lambda: build_setup(plan))


def from_run(**values: Any) -> ConfigPath:
    """The path of a tiny run's config from ``initmem_core.run``, untracked."""
    import initmem_core

    config = RunConfig(**{**TINY, **values})
    return trace(lambda: initmem_core.run(config, tracking=False))


def table(paths: dict[str, ConfigPath]) -> str:
    lines = [
        "| followed from | enters optimizer_options | enters horizons | comes back to a module it left "
        "| climbs a layer |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for start, path in paths.items():
        lines.append(
            f"| {start} | {path.entered('optimizer_options')} | {path.entered('horizons')} | "
            f"{path.returns} | {path.climbs} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-docs", action="store_true", help=f"write the table into {DOCS.name}")
    args = parser.parse_args(argv)
    paths = {
        "`build_setup(plan)`": from_build_setup(opt="sgd", momentum=0.9, until="clock_sgd=0.001", epochs=50),
        "`run(config)`": from_run(opt="sgd", momentum=0.9, until="clock_sgd=0.001", epochs=50),
    }
    text = table(paths)
    print(text)
    if args.write_docs:
        page = DOCS.read_text()
        block = f"{BEGIN}\n{text}\n{END}"
        page, found = re.subn(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, page, flags=re.S)
        if not found:
            raise SystemExit(f"{DOCS}: no {BEGIN} ... {END} markers")
        DOCS.write_text(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
