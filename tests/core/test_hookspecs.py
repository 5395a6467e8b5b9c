"""Every hook is documented: prefixed, with a docstring that has an example, and in the docs."""

from __future__ import annotations

import inspect

import pytest

from initmem_core import hookspecs
from initmem_core.kinds import KINDS, PLUGIN_KINDS


def hook_functions():
    return {name: fn for name, fn in vars(hookspecs).items() if callable(fn) and hasattr(fn, "initmem_spec")}


def test_every_hook_is_prefixed_documented_and_has_an_example():
    hooks = hook_functions()
    assert set(hooks) == {kind.hook for kind in PLUGIN_KINDS}
    for name, fn in hooks.items():
        assert name.startswith("initmem_")
        doc = inspect.getdoc(fn) or ""
        assert len(doc.splitlines()) > 3, f"{name} has no real docstring"
        assert "Example::" in doc and "register(" in doc, f"{name} has no example"
        assert list(inspect.signature(fn).parameters) == ["register"]


def test_the_kinds_table_names_real_hooks_fields_and_contracts():
    import dataclasses
    from typing import Protocol

    from initmem_core.config import RunConfig
    from initmem_core.kinds import resolve

    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    for kind in KINDS:
        assert kind.field in fields, f"{kind.name}: RunConfig has no field {kind.field}"
        assert isinstance(getattr(RunConfig(), kind.field), tuple) == kind.many
        assert kind.flag.startswith("--")
    assert set(hookspecs.DOCS) == {kind.name for kind in PLUGIN_KINDS}, "one hook docstring per kind"
    for kind in PLUGIN_KINDS:
        if kind.contract:  # an import string of a protocol whose __call__ is what the factory is called as
            contract = resolve(kind.contract)
            assert Protocol in contract.__mro__ and "__call__" in vars(contract), f"{kind.name}: {kind.contract}"
        if kind.info is not None:  # a frozen record, every field with a default (declaring nothing is valid)
            assert dataclasses.is_dataclass(kind.info) and kind.info() == kind.info()
            with pytest.raises(dataclasses.FrozenInstanceError):
                kind.info().x = 1  # type: ignore[attr-defined]


def test_register_builds_the_kinds_info_record_and_refuses_what_it_does_not_declare():
    from initmem_core.contracts import ClaimInfo, OptimizerInfo
    from initmem_core.plugin_system.loader import load_registry

    class Plugin:
        @hookspecs.hookimpl
        def initmem_register_optimizers(self, register):
            register("plain", "torch.optim:SGD", "declares nothing")
            register("lion-ish", "torch.optim:SGD", "declares", defaults={"lr": 0.3}, clock="lr")

        @hookspecs.hookimpl
        def initmem_register_claims(self, register):
            register("c", "x:y", "a claim", axis=("opt",), threshold=2.0)

    registry = load_registry(strict=True, entry_points=False, extra_plugins=[("p", Plugin())])
    assert registry.lookup("optimizer", "plain")[0].info == OptimizerInfo()
    assert registry.lookup("optimizer", "lion-ish")[0].info == OptimizerInfo({"lr": 0.3}, "lr")
    assert registry.lookup("claim", "c")[0].info == ClaimInfo(axis=("opt",), threshold=2.0)
    assert registry.lookup("metric", "weight-norms")[0].info is None  # a metric declares nothing

    class Wrong:
        @hookspecs.hookimpl
        def initmem_register_metrics(self, register):
            register("m", "x:y", "a metric", clock="lr")

    with pytest.warns(UserWarning, match="kind 'metric' takes no clock$"):
        broken = load_registry(entry_points=False, extra_plugins=[("wrong", Wrong())])
    assert [failure.plugin for failure in broken.failures] == ["wrong"]
