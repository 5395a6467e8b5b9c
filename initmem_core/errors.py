"""Errors a user can act on.

Every ``InitmemError`` carries one line that says what is wrong and how to fix it. The CLI
prints that line and exits with code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib


class InitmemError(Exception):
    """A problem with the user's input or environment, explained in one line."""


class ConfigError(InitmemError):
    """A configuration value is invalid."""


class UnknownComponentError(InitmemError):
    """A component name that no plugin registered."""

    def __init__(self, kind: str, name: str, valid: list[str]):
        self.kind, self.name, self.valid = kind, name, ordered_by_similarity(name, valid)
        listing = ", ".join(self.valid) if self.valid else "(none registered)"
        super().__init__(f"unknown {kind} '{name}'; valid names: {listing}")


class DuplicateComponentError(InitmemError):
    """Two plugins registered the same component name."""


class PluginLoadError(InitmemError):
    """A plugin failed to load while strict plugin loading is on."""


class RunWarning(UserWarning):
    """Something a run worked around (a corrupt checkpoint skipped, metrics left unsynced); one line."""


def ordered_by_similarity(name: str, candidates: list[str]) -> list[str]:
    """Return ``candidates`` with the closest matches to ``name`` first, the rest sorted."""
    close = difflib.get_close_matches(name, candidates, n=len(candidates), cutoff=0.0)
    return close if close else sorted(candidates)


class Diverged(RuntimeError):
    """The loss or the weights became non-finite (``training.divergence`` detects it). Here, not
    there, so that catching it imports no torch."""

    def __init__(self, epoch: int, what: str, step: int | None = None):
        self.epoch, self.step = epoch, step
        where = f"epoch {epoch}" if step is None else f"epoch {epoch} (step {step})"
        super().__init__(f"diverged in {where}: {what} is not finite")
