"""Every hook is documented: prefixed, with a docstring that has an example, and in the docs."""

from __future__ import annotations

import inspect

from initmem_core import hookspecs


def hook_functions():
    return {name: fn for name, fn in vars(hookspecs).items()
            if callable(fn) and hasattr(fn, "initmem_spec")}


def test_every_hook_is_prefixed_documented_and_has_an_example():
    hooks = hook_functions()
    assert set(hooks) == set(hookspecs.COMPONENT_KINDS.values())
    for name, fn in hooks.items():
        assert name.startswith("initmem_")
        doc = inspect.getdoc(fn) or ""
        assert len(doc.splitlines()) > 3, f"{name} has no real docstring"
        assert "Example::" in doc and "register(" in doc, f"{name} has no example"
        assert list(inspect.signature(fn).parameters) == ["register"]
