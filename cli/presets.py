"""``initmem presets``: the paper's sweeps, ready to run with ``initmem sweep --preset NAME``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from initmem_core.groups import group_keys

from .errors import user_errors
from .script_output import JSON_HELP, ScriptOutput
from .tables import prose_console

presets_app = typer.Typer(
    help="List the paper's sweep presets, or print one as an editable sweep file.",
    invoke_without_command=True,
    no_args_is_help=False,
)


@presets_app.callback()
@user_errors
def list_presets(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False) -> None:
    """List every preset with its grid: cells, groups and what varies."""
    if ctx.invoked_subcommand:
        return
    from initmem_core.sweep.grid import expand  # lazy: keeps sweep.grid out of the CLI's start-up
    from initmem_core.sweep.presets import (  # lazy: imports sweep.grid, kept out of the CLI's start-up
        preset_description,
        preset_names,
        preset_spec,
    )

    table = Table(title="initmem presets (run with `initmem sweep --preset NAME`)", show_lines=True, expand=True)
    for column in ("preset", "cells", "groups", "varies", "description"):
        # Text folds onto more lines, never cut: a word wider than its column is broken, not elided.
        table.add_column(
            column,
            justify="right" if column in ("cells", "groups") else "left",
            no_wrap=column == "preset",
            overflow="fold",
            ratio={"varies": 1, "description": 2}.get(column),
        )
    presets = []
    for name in preset_names():
        spec = preset_spec(name)
        cells = expand(spec)
        groups = set(group_keys(cells))
        presets.append(
            {
                "name": name,
                "cells": len(cells),
                "groups": len(groups),
                "varies": list(spec.varying),
                "description": preset_description(name),
            }
        )
        table.add_row(name, str(len(cells)), str(len(groups)), ", ".join(spec.varying), preset_description(name))
    if as_json:
        ScriptOutput(as_json).emit(presets)
    else:
        prose_console().print(table)  # in a file or a pipe: wrapped at a readable width, not padded


@presets_app.command("show")
@user_errors
def show_preset(name: Annotated[str, typer.Argument(help="Preset name, e.g. paper-mini")]) -> None:
    """Print a preset's sweep file: `initmem presets show paper-mini > sweep.toml`, edit, `--config sweep.toml`."""
    from initmem_core.sweep.presets import preset_text  # lazy: imports sweep.grid, kept out of the CLI's start-up

    typer.echo(preset_text(name), nl=False)
