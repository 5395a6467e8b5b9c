"""Named components registered by plugins, looked up by kind and name.

A ``ComponentSpec`` is a record, not an object: it holds the factory (often an import string)
and who provided it. Nothing is imported or built until ``build`` is called.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from initmem_core.errors import DuplicateComponentError, UnknownComponentError
from initmem_core.kinds import BY_NAME, resolve

FAMILY_SUFFIX = ":*"


@dataclass(frozen=True)
class Provider:
    """Where a component came from: the plugin (entry-point) name and its distribution."""

    plugin: str
    package: str
    version: str

    def __str__(self) -> str:
        return f"plugin '{self.plugin}' ({self.package} {self.version})"


@dataclass(frozen=True)
class ComponentSpec:
    kind: str
    name: str
    factory: Callable[..., Any] | str
    description: str
    provider: Provider
    default: bool = False  # built into every run (the built-in metrics), whatever the config names
    #: What it declares beside its factory: a record of its kind's ``info`` class (``kinds``; its
    #: defaults when not given), ``None`` for a kind that declares nothing.
    info: Any = None

    def __post_init__(self) -> None:
        record = BY_NAME[self.kind].info if self.kind in BY_NAME else None
        if self.info is None and record is not None:
            object.__setattr__(self, "info", record())

    @property
    def is_family(self) -> bool:
        return self.name.endswith(FAMILY_SUFFIX)

    def load_factory(self) -> Callable[..., Any]:
        """Resolve an import-string factory (this is where heavy imports happen)."""
        return self.factory if callable(self.factory) else resolve(self.factory)

    def build(self, variant: str | None = None, **kwargs: Any) -> Any:
        """Call the factory with the keyword arguments of its kind's contract that it accepts
        (a factory may take a subset, as hook implementations may): all of them when it has
        ``**kwargs`` (or no signature to read), else the names it declares."""
        if self.is_family:
            kwargs["variant"] = variant
        factory = self.load_factory()
        try:
            parameters = inspect.signature(factory).parameters.values()
        except (TypeError, ValueError):  # builtins without a signature
            return factory(**kwargs)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            kwargs = {key: value for key, value in kwargs.items() if key in {p.name for p in parameters}}
        return factory(**kwargs)


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded, and why."""

    plugin: str
    package: str
    version: str
    error: str

    def __str__(self) -> str:
        return f"plugin '{self.plugin}' ({self.package} {self.version}) failed to load: {self.error}"


@dataclass
class Registry:
    components: dict[str, dict[str, ComponentSpec]] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)
    plugins: dict[str, Provider] = field(default_factory=dict)
    #: (kind, name) -> every spec that claimed it. Using such a name is an error; other names
    #: keep working, so one clashing plugin does not take its siblings down.
    conflicts: dict[tuple[str, str], list[ComponentSpec]] = field(default_factory=dict)

    def add(self, spec: ComponentSpec) -> None:
        by_name = self.components.setdefault(spec.kind, {})
        if spec.name in by_name:
            self.conflicts.setdefault((spec.kind, spec.name), [by_name[spec.name]]).append(spec)
        else:
            by_name[spec.name] = spec

    def conflict_error(self, kind: str, name: str) -> DuplicateComponentError:
        first, *others = self.conflicts[(kind, name)]
        also = " and by ".join(str(spec.provider) for spec in others)
        return DuplicateComponentError(
            f"{kind} '{name}' is registered twice: by {first.provider} and by {also}; "
            "uninstall one of them or leave one out with INITMEM_LOAD_PLUGINS"
        )

    def with_component(self, spec: ComponentSpec) -> Registry:
        """A copy in which ``spec`` answers to its kind and name (a test wraps a component so)."""
        components = {kind: dict(specs) for kind, specs in self.components.items()}
        components.setdefault(spec.kind, {})[spec.name] = spec
        return Registry(components, list(self.failures), dict(self.plugins), dict(self.conflicts))

    def names(self, kind: str) -> list[str]:
        return sorted(self.components.get(kind, {}))

    def defaults(self, kind: str) -> list[str]:
        """Names registered with ``default=True``: built into every run, in registration order."""
        return [name for name, spec in self.components.get(kind, {}).items() if spec.default]

    def all_specs(self) -> list[ComponentSpec]:
        return [spec for kind in self.components.values() for spec in kind.values()]

    def lookup(self, kind: str, name: str) -> tuple[ComponentSpec, str | None]:
        """Return the spec for ``name`` and, for a family like ``timm:*``, the variant."""
        by_name = self.components.get(kind, {})
        if (kind, name) in self.conflicts:
            raise self.conflict_error(kind, name)
        if name in by_name and not by_name[name].is_family:
            return by_name[name], None
        prefix, sep, variant = name.partition(":")
        family = by_name.get(prefix + FAMILY_SUFFIX)
        if sep and variant and family is not None:
            if (kind, family.name) in self.conflicts:
                raise self.conflict_error(kind, family.name)
            return family, variant
        raise UnknownComponentError(kind, name, self.names(kind))

    def build(self, kind: str, name: str, **kwargs: Any) -> Any:
        spec, variant = self.lookup(kind, name)
        return spec.build(variant, **kwargs)
