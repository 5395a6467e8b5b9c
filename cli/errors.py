"""User errors and usage errors become one line on stderr and exit code 2."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperGroup

try:  # recent Typer carries its own copy of Click, whose context and exceptions are not click's
    from typer._click import Context
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # mypy reads a recent Typer's: this older Typer's names are Click's types
    from click import Context  # type: ignore[assignment]
    from click.exceptions import NoArgsIsHelpError, UsageError  # type: ignore[assignment]

from initmem_core.errors import InitmemError
from initmem_core.tracking.login import refusal
from initmem_core.tracking.uris import resolve_tracking_uri

from .output import DISK_FULL

USER_ERROR = 2


def fail(message: str, code: int = USER_ERROR) -> typer.Exit:
    typer.secho(f"Error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code)


def user_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn an ``InitmemError`` into one clear line and exit code 2, with no traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except InitmemError as error:
            raise fail(str(error)) from None
        except OSError as error:
            if error.errno in DISK_FULL:  # a file's write (no path named) as well as its opening
                raise fail(disk_full(error)) from None
            if error.filename is None:  # not about a path the user can fix
                raise
            raise fail(f"{error.filename}: {error.strerror or error}; choose a path this user can write") from None
        except Exception as error:  # a tracking server's refusal that no store_must_answer wrapped
            refused = _refused_login(error, kwargs.get("tracking_uri"))
            if not refused:
                raise
            raise fail(refused) from None

    return wrapper


def disk_full(error: OSError) -> str:
    """One line for a write a full disk refused; ``write_text`` and savefig name no path."""
    where = f"{error.filename}: " if error.filename else "a file could not be written: "
    return (
        f"{where}{error.strerror or error}; free space on that disk (the output folder, checkpoints or "
        "tracking store) or write elsewhere, and run the command again"
    )


def _refused_login(error: Exception, tracking_uri: str | None) -> str:
    """One line for a tracking server that refused the login (HTTP 401/403) on a request that no
    ``store_must_answer`` wraps (``tracking.login.refusal``); empty otherwise."""
    if getattr(error, "error_code", None) is None:
        return ""

    return refusal(resolve_tracking_uri(tracking_uri), error)


class OneLineUsageErrors(TyperGroup):
    """Click's own usage errors (a value not among an option's choices, a missing argument, an
    unknown command) as one line on stderr with exit code 2, like every other user error."""

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise  # shows the command's help
        except UsageError as error:
            where = error.ctx.command_path if error.ctx else ctx.command_path
            raise fail(f"{error.format_message()} (see `{where} --help`)") from None
