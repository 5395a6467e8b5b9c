"""``initmem new-plugin``: write a pip-installable plugin package with a working component
(``scaffold``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from initmem_core.plugin_system.loader import get_registry

from .scaffold import SCAFFOLD_KINDS, create_plugin, try_it


def complete_kind(incomplete: str) -> list[str]:
    return [kind for kind in SCAFFOLD_KINDS if kind.startswith(incomplete)]


def new_plugin_command(
    kind: Annotated[
        str,
        typer.Argument(
            metavar="KIND",
            help=f"Kind of component: {', '.join(SCAFFOLD_KINDS)}",
            autocompletion=complete_kind,
            show_default=False,
        ),
    ],
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="Component name users will type, e.g. sign-sgd", show_default=False)
    ],
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Folder to create (default: ./initmem-<name>); must not exist")
    ] = None,
) -> None:
    """Create a plugin package, e.g. `initmem new-plugin optimizer sign-sgd`."""
    folder, written = create_plugin(kind, name, directory, get_registry())
    typer.echo(f"Created the {kind} plugin '{name}' in {folder}:")
    for path in written:
        typer.echo(f"  {path.relative_to(folder)}")
    typer.echo(f"Next:\n  pip install -e {folder}\n  python -m pytest {folder}\n  {try_it(kind, name)}")
