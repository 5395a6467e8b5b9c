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
        self.kind, self.name, self.valid = kind, name, sorted(valid)
        listing = ", ".join(self.valid) if self.valid else "(none registered)"
        # A model's name (digits in it) no registered name is close to may be a family's variant:
        # resnet18 is timm:resnet18, not resnet110; resnet57 is still resnet56.
        model = ":" not in name and any(map(str.isdigit, name))
        family = [f"{v[:-1]}{name}" for v in self.valid if v.endswith(":*") and model]
        near = difflib.get_close_matches(name, valid, n=1, cutoff=0.85)  # one digit off: resnet57, resnet56
        hint = f" (did you mean '{family[0]}'?)" if family and not near else did_you_mean(name, valid)
        super().__init__(f"unknown {kind} '{name}'{hint}; valid names: {listing}")


class DuplicateComponentError(InitmemError):
    """Two plugins registered the same component name."""


class PluginLoadError(InitmemError):
    """A plugin failed to load while strict plugin loading is on."""


class RunWarning(UserWarning):
    """Something a run worked around (a corrupt checkpoint skipped, metrics left unsynced); one line."""


def did_you_mean(name: str, candidates: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean 'adam'?)`` when one of ``candidates`` is close to ``name`` (difflib's
    ratio of at least 0.6), else nothing: what an unknown name's message puts before the sorted list."""
    close = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


class Diverged(RuntimeError):
    """The loss or the weights became non-finite (``training.divergence`` detects it). Here, not
    there, so that catching it imports no torch."""

    def __init__(self, epoch: int, what: str, step: int | None = None):
        self.epoch, self.step = epoch, step
        where = f"epoch {epoch}" if step is None else f"epoch {epoch} (step {step})"
        super().__init__(f"diverged in {where}: {what} is not finite")
