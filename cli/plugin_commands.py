"""The ``initmem`` subcommands plugins register (``initmem_register_commands``), listed in
``initmem --help`` and run beside the built-in ones. A command is imported only when it is listed
or run; one whose module fails to import is left out with a one-line warning."""

from __future__ import annotations

import warnings
from typing import Any

import typer

from initmem_core.errors import DuplicateComponentError, UnknownComponentError
from initmem_core.plugin_system.loader import PluginLoadWarning, get_registry, one_line_warnings
from initmem_core.plugin_system.registry import ComponentSpec

from .errors import OneLineUsageErrors, fail, user_errors
from .options import ENVIRONMENT_HELP, summary

KIND = "command"  # ``kinds.REPORT_KINDS``


class WithPluginCommands(OneLineUsageErrors):
    """The root group: its own commands first, then those plugins register under other names."""

    def list_commands(self, ctx: Any) -> list[str]:
        one_line_warnings()  # `initmem --help` is answered before the app's callback installs them
        registry = get_registry()
        own = super().list_commands(ctx)
        names = []
        for name, spec in registry.components.get(KIND, {}).items():
            if name in self.commands:
                warning = f"{spec.provider}: its command '{name}' is initmem's own; it is ignored"
                warnings.warn(warning, PluginLoadWarning, stacklevel=2)
            elif (KIND, name) not in registry.conflicts:
                names.append(name)
        return own + sorted(names)

    def get_command(self, ctx: Any, name: str) -> Any:
        own = super().get_command(ctx, name)
        if own is not None:
            return own
        one_line_warnings()
        try:
            spec, _ = get_registry().lookup(KIND, name)
        except DuplicateComponentError as error:
            raise fail(str(error)) from None
        except UnknownComponentError:
            return None  # click says "No such command", in one line
        return plugin_command(spec)


def plugin_command(spec: ComponentSpec) -> Any:
    """The click command Typer makes of a registered command function, which reports an
    ``InitmemError`` in one line; ``None`` (and a warning) when its module fails to import."""
    try:
        function = spec.load_factory()
    except Exception as error:  # a broken plugin command takes no other command down
        warnings.warn(
            f"{spec.provider}: its command '{spec.name}' failed to load: {type(error).__name__}: {error}",
            PluginLoadWarning,
            stacklevel=2,
        )
        return None
    app = typer.Typer()
    app.command(spec.name, short_help=summary(spec.description or function.__doc__) or None, epilog=ENVIRONMENT_HELP)(
        user_errors(function)
    )
    return typer.main.get_command(app)
