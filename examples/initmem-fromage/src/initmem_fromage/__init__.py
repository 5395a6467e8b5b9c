"""Fromage for initmem. Importing the package is cheap; ``Fromage`` loads torch on first use."""

from __future__ import annotations

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "Fromage":
        from .optimizer import Fromage

        return Fromage
    raise AttributeError(f"module 'initmem_fromage' has no attribute {name!r}")


__all__ = ["Fromage", "__version__"]
