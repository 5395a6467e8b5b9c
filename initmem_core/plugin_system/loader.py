"""Load plugins into a pluggy manager and collect what they register.

Built-in plugins load from their modules (``BUILTIN_PLUGINS``, so a source checkout works even
when the installed entry-point metadata is stale); the optional ones (``OPTIONAL_BUILTINS``: the
paper's claims and presets, the figures, the executors, the commands) too, but only when ``INITMEM_LOAD_PLUGINS``
admits them, like a third-party plugin. Third-party plugins load from the ``initmem`` entry-point
group, one at a time: a plugin that fails to import, has an invalid or misspelt hook, raises while
registering or declares an ``INITMEM_API`` range that excludes this initmem's ``API_VERSION`` is
skipped with a one-line warning, and everything else keeps working. ``INITMEM_LOAD_PLUGINS``
allow-lists third-party plugins and the optional built-ins (unset: all; empty: none);
``INITMEM_STRICT_PLUGINS=1`` (or ``strict=True``) turns every load failure into an error.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata as metadata
import os
import sys
import warnings
from collections.abc import Iterable
from typing import Any

import pluggy

from initmem_core import hookspecs
from initmem_core.contracts import Register
from initmem_core.errors import PluginLoadError, RunWarning
from initmem_core.kinds import PLUGIN_KINDS, ComponentKind
from initmem_core.plugin_system.api_version import check_plugin_api
from initmem_core.plugin_system.registry import ComponentSpec, PluginFailure, Provider, Registry

ENTRY_POINT_GROUP = "initmem"
LOAD_PLUGINS_ENV = "INITMEM_LOAD_PLUGINS"
STRICT_ENV = "INITMEM_STRICT_PLUGINS"

#: Built-in plugin name -> module. pyproject.toml declares the same under the entry-point group.
BUILTIN_PLUGINS = {
    "architectures": "initmem_plugins.architectures",
    "optimizers": "initmem_plugins.optimizers",
    "initializers": "initmem_plugins.initializers",
    "regularizers": "initmem_plugins.regularizers",
    "metrics": "initmem_plugins.metrics",
    "datasets": "initmem_plugins.datasets",
}
#: Built-in plugins that ``INITMEM_LOAD_PLUGINS`` may leave out.
OPTIONAL_BUILTINS = {
    "claims": "initmem_plugins.claims",  # the paper's claims and presets
    "executors": "initmem_plugins.executors",  # local, ray, slurm
    "figures": "initmem_plugins.figures",  # matplotlib: without them a report has its tables alone
    "commands": "initmem_plugins.commands",  # initmem new-plugin, initmem clean
}


class PluginLoadWarning(UserWarning):
    """A plugin was skipped because it failed to load."""


def one_line_warnings() -> None:
    """Show plugin and run warnings as one line each on stderr (Python's default adds the source
    line). The CLI installs it, and so does every sweep worker process, which starts bare."""
    default = warnings.showwarning
    if getattr(default, "one_line", False):
        return  # installed already

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, (PluginLoadWarning, RunWarning)):
            print(f"Warning: {' '.join(str(message).split())}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    show.one_line = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def initmem_version() -> str:
    try:
        return metadata.version("initmem")
    except metadata.PackageNotFoundError:
        return "source"


class _Loader:
    """Registers plugin objects one by one, recording failures instead of raising."""

    def __init__(self, strict: bool):
        self.strict = strict
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.registry = Registry()

    def fail(self, provider: Provider, error: BaseException) -> None:
        text = " ".join(f"{type(error).__name__}: {error}".split())  # one line, always
        failure = PluginFailure(provider.plugin, provider.package, provider.version, text)
        if self.strict:
            raise PluginLoadError(f"{failure} (strict plugin loading is on)")
        self.registry.failures.append(failure)
        warnings.warn(str(failure), PluginLoadWarning, stacklevel=4)

    def add(self, provider: Provider, load: Any) -> None:
        """``load`` returns the plugin object (a module or any object with hook implementations)."""
        try:
            plugin = load()
            check_plugin_api(plugin)
            unknown = [
                name
                for name in dir(plugin)
                if name.startswith("initmem_")
                and hasattr(getattr(plugin, name), "initmem_impl")
                and not hasattr(hookspecs, name)
            ]
            if unknown:
                raise pluggy.PluginValidationError(
                    plugin, f"unknown hook {unknown[0]}; valid hooks: {', '.join(kind.hook for kind in PLUGIN_KINDS)}"
                )
            self.pm.register(plugin, name=provider.plugin)
        except (PluginLoadError, KeyboardInterrupt):
            raise
        except BaseException as error:  # a broken plugin (even one calling sys.exit) must not take the others down
            self.fail(provider, error)
            return
        self.registry.plugins[provider.plugin] = provider

    @staticmethod
    def register_for(kind: ComponentKind, provider: Provider, specs: list[ComponentSpec]) -> Register:
        """The ``register`` one hook implementation receives: what it registers goes to ``specs``;
        what it declares beside its factory becomes the kind's info record, an unknown keyword a
        ``TypeError`` (the plugin fails to load)."""

        def register(name: str, factory: Any, description: str = "", *, default: bool = False, **declared: Any) -> None:
            fields = [field.name for field in dataclasses.fields(kind.info)] if kind.info else []
            if unknown := [key for key in declared if key not in fields]:
                takes = f"; it takes {', '.join(fields)}" if fields else ""
                raise TypeError(f"register() of kind '{kind.name}' takes no {', '.join(unknown)}{takes}")
            info = kind.info(**declared) if kind.info else None
            specs.append(ComponentSpec(kind.name, str(name), factory, str(description), provider, bool(default), info))

        return register

    def collect(self) -> Registry:
        self.pm.check_pending()  # every hook implemented must match a spec (checked above too)
        for kind in PLUGIN_KINDS:
            # One implementation at a time: what each plugin registers is kept apart, so a plugin
            # that raises half-way registers nothing and takes no sibling down.
            for impl in getattr(self.pm.hook, kind.hook).get_hookimpls():
                provider = self.registry.plugins[impl.plugin_name]
                specs: list[ComponentSpec] = []
                register = self.register_for(kind, provider, specs)
                try:
                    impl.function(**{arg: register for arg in impl.argnames})
                except (PluginLoadError, KeyboardInterrupt):
                    raise
                except BaseException as error:  # SystemExit included
                    self.fail(provider, error)
                    continue
                for spec in specs:
                    self.registry.add(spec)
        if self.strict and self.registry.conflicts:
            raise self.registry.conflict_error(*next(iter(self.registry.conflicts)))
        return self.registry


def load_registry(
    *,
    strict: bool | None = None,
    entry_points: bool = True,
    extra_plugins: Iterable[tuple[str, Any]] = (),
) -> Registry:
    """Load every plugin and return the registry of what they registered.

    ``extra_plugins`` are ``(name, plugin_object)`` pairs registered directly, as tests and
    notebooks do (``initmem_core.testing`` wraps this).
    """
    if strict is None:
        strict = os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes", "on"}
    loader = _Loader(strict)
    version = initmem_version()
    value = os.environ.get(LOAD_PLUGINS_ENV)  # the names allowed; unset: all
    allowed = None if value is None else {name.strip() for name in value.split(",") if name.strip()}
    builtins = {**BUILTIN_PLUGINS, **OPTIONAL_BUILTINS}
    for name, module_name in builtins.items():
        if name in BUILTIN_PLUGINS or allowed is None or name in allowed:
            loader.add(Provider(name, "initmem", version), lambda m=module_name: importlib.import_module(m))
    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points else ():
        dist = entry_point.dist
        package = dist.name if dist else "?"
        if package == "initmem" and entry_point.name in builtins:
            continue  # loaded from BUILTIN_PLUGINS and OPTIONAL_BUILTINS above
        if allowed is None or {entry_point.name, package} & allowed:
            loader.add(Provider(entry_point.name, package, dist.version if dist else "?"), entry_point.load)
    for name, plugin in extra_plugins:
        loader.add(Provider(name, getattr(plugin, "__module__", None) or name, "local"), lambda p=plugin: p)
    return loader.collect()


_registry: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry, loaded on first use."""
    global _registry
    if _registry is None:
        _registry = load_registry()
    return _registry


def set_registry(registry: Registry | None) -> Registry | None:
    """Replace (or with ``None``, reset) the process-wide registry; return the one it replaced.

    Used by tests, which put the previous one back afterwards.
    """
    global _registry
    previous, _registry = _registry, registry
    return previous
