"""Command-line options generated from ``RunConfig``: one definition per knob, for every command.

``run`` takes typed values; ``sweep`` takes the same options as text that may hold a list or a
range. The help text and panels come from the config fields themselves.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from initmem_core.config import FIELDS, field_type
from initmem_core.kinds import BY_FIELD, flag_for
from initmem_core.plugin_system.loader import LOAD_PLUGINS_ENV, STRICT_ENV, get_registry
from initmem_core.tracking.login import PASSWORD_ENV, TOKEN_ENV, USERNAME_ENV
from initmem_core.tracking.uris import (
    ALLOW_FILE_STORE_ENV,
    DEFAULT_EXPERIMENT,  # noqa: F401  (the commands take it from here)
    TRACKING_URI_ENV,
)

TRACKING = "Tracking"


#: The environment variables initmem reads, for the epilog of ``--help`` (``grep os.environ``
#: finds each reader). Rich folds the lines; a blank line between two keeps them apart.
def summary(text: str | None) -> str:
    """A command's one-line summary in ``initmem --help``: the first paragraph of its help as one
    sentence (its line breaks joined, a full stop at its end), never broken mid-sentence."""
    first = " ".join((text or "").strip().split("\n\n")[0].split())
    return first if not first or first.endswith((".", "!", "?")) else first + "."


ENVIRONMENT_HELP = "\n\n".join(
    [
        "[bold]Environment[/bold]",
        f"{TRACKING_URI_ENV}: the tracking store when --tracking-uri is not given (default sqlite:///mlflow.db)",
        f"{USERNAME_ENV}, {PASSWORD_ENV} or {TOKEN_ENV}: the login of a tracking server that asks for one",
        f"{ALLOW_FILE_STORE_ENV}=true: allow MLflow's file store (a folder) as the tracking store",
        f"{LOAD_PLUGINS_ENV}=a,b: load only these third-party plugins and optional built-ins (the paper's "
        "claims and presets: claims; the report's figures: figures; the sweep executors: executors; "
        "new-plugin and clean: commands); "
        "empty: the built-in components only",
        f"{STRICT_ENV}=1: a plugin that does not load is an error (as --strict-plugins)",
        "CUDA_VISIBLE_DEVICES, CUBLAS_WORKSPACE_CONFIG: the GPUs a run sees, cuBLAS's deterministic workspace",
        "MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL: seconds between --system-metrics samples (default 5)",
    ]
)

#: The options every command that reads or writes the tracking store shares.
TrackingUri = Annotated[
    str | None,
    typer.Option(
        help=f"MLflow tracking URI (default: ${TRACKING_URI_ENV} or sqlite:///mlflow.db)", rich_help_panel=TRACKING
    ),
]
Experiment = Annotated[str, typer.Option(help="MLflow experiment", rich_help_panel=TRACKING)]


def complete_component(kind: str) -> Callable[[str], list[str]]:
    def complete(incomplete: str) -> list[str]:
        return [n for n in get_registry().names(kind) if n.startswith(incomplete)]

    return complete


def _option(name: str, field: dataclasses.Field, as_text: bool, shown: str | None = None) -> inspect.Parameter:
    meta = field.metadata
    kind = field_type(name)
    help_text = meta["help"]
    if meta["choices"]:
        help_text += f" [{'|'.join(meta['choices'])}]"
    metavar = None
    if as_text:
        annotation: Any = str | None
        help_text += "; a list (a,b,c) or, for numbers, a range start:stop:count"
    elif kind is tuple:
        annotation = list[str] | None
    elif kind in (int, float):
        # Parsed by config.coerce, so a value that is not a number gets one line like any bad value.
        annotation, metavar = str | None, "INTEGER" if kind is int else "FLOAT"
    else:
        annotation = kind | None
    default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
    option = typer.Option(
        flag_for(name),
        help=help_text,
        rich_help_panel=meta["panel"],
        metavar=metavar,
        show_default=shown
        or meta.get("shown")
        or (",".join(default) if isinstance(default, tuple) else str(default))
        or "none",
        autocompletion=complete_component(BY_FIELD[name].name) if name in BY_FIELD else None,
    )
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[annotation, option]
    )


def with_config_options(
    as_text: bool = False, shown: dict[str, str] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add one option per ``RunConfig`` field to a command; ``shown``: the default ``--help``
    states for a field, where this command runs with another than the field's (a sweep's threads).

    The command receives ``config_values``: a dict of only the options the user gave (values
    typed for ``run``, raw text for ``sweep``), so a TOML file's values are not overwritten by
    defaults.
    """

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "config_values"]
        extra = [_option(name, field, as_text, (shown or {}).get(name)) for name, field in FIELDS.items()]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in FIELDS}
            given = {name: value for name, value in values.items() if value not in (None, [])}
            return command(config_values=given, **kwargs)

        parameters = own + extra
        wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
        del wrapper.__wrapped__  # typer must read the new signature, not the original one
        return wrapper

    return decorate
