"""Test helpers for plugin authors; pytest loads this module as its plugin ``initmem``.

In a plugin package's tests::

    from initmem_core.testing import check_optimizer, smoke_train
    from my_package import plugin

    def test_contract(initmem_registry):
        initmem_registry(plugin)          # built-ins + this plugin, for this test only
        check_optimizer("my-opt")

    def test_trains(initmem_registry):
        initmem_registry(plugin)
        assert smoke_train("optimizer", "my-opt", steps=3).status == "FINISHED"

pytest imports this module in every session of everyone who has initmem installed, so it must
stay cheap: torch loads only when a check or ``smoke_train`` is first used (they live in
``initmem_core.testing.checks`` and are re-exported here lazily).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import pytest

from initmem_core.plugin_system.loader import load_registry, set_registry
from initmem_core.plugin_system.registry import Registry

#: Helpers that need torch, imported on first use.
_LAZY = {
    name: "initmem_core.testing.checks"
    for name in (
        "smoke_train",
        "check_architecture",
        "check_optimizer",
        "check_initializer",
        "check_regularizer",
        "check_metric",
        "check_dataset",
    )
}

#: The claim's calibration on synthetic sweeps (numpy and scipy), imported on first use.
_LAZY.update({name: "initmem_core.testing.calibration" for name in ("calibrate_claim", "ClaimCalibration")})

__all__ = ["initmem_registry", "registered_plugins", *_LAZY]


@contextlib.contextmanager
def registered_plugins(*plugins: Any) -> Iterator[Registry]:
    """Make the process-wide registry the built-ins plus ``plugins``; put the previous one back after.

    ``plugins`` are plugin objects: modules or instances with ``@hookimpl`` methods. Installed
    entry points are left out, so a test sees the same components on every machine, and loading
    is strict: a plugin that fails to load fails the test instead of warning.
    """
    named = [(getattr(p, "__name__", None) or type(p).__name__, p) for p in plugins]
    registry = load_registry(strict=True, entry_points=False, extra_plugins=named)
    previous = set_registry(registry)
    try:
        yield registry
    finally:
        set_registry(previous)


@pytest.fixture
def initmem_registry() -> Iterator[Any]:
    """Register plugin objects for one test: ``registry = initmem_registry(my_plugin)``.

    The returned registry becomes the process-wide one, so ``initmem_core.run``, the CLI and the
    ``check_*`` helpers use it. It is undone when the test ends.
    """
    with contextlib.ExitStack() as stack:
        yield lambda *plugins: stack.enter_context(registered_plugins(*plugins))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'initmem_core.testing' has no attribute {name!r}")
