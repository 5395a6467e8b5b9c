"""Every hook is documented: prefixed, with a docstring that has an example, and in the docs."""

from __future__ import annotations

import inspect

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

    from initmem_core import contracts
    from initmem_core.config import RunConfig

    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    for kind in KINDS:
        assert kind.field in fields, f"{kind.name}: RunConfig has no field {kind.field}"
        assert isinstance(getattr(RunConfig(), kind.field), tuple) == kind.many
        assert kind.contract in contracts.FACTORIES, f"{kind.name}: no contract {kind.contract}"
        assert kind.flag.startswith("--")
