"""``initmem plugins``: every registered component and every plugin that failed to load.

Builds nothing and imports neither torch nor mlflow.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from initmem_core.kinds import KIND_NAMES
from initmem_core.plugin_system.loader import get_registry
from initmem_core.plugin_system.optimizer_options import FALLBACK_LR, describe
from initmem_core.training.clocks import CONVENTION_FAMILIES, UNDECLARED

from .errors import user_errors
from .tables import prose_console


def optimizer_declarations(spec) -> dict:
    """An optimizer's clock convention, its family in the report's claims and its default rate,
    as declared (a family such as ``timm:*`` declares them per variant: read only when used)."""
    info = spec.info
    if ":" in info.clock:
        clock, family = "per variant", "per variant"
    else:
        clock = info.clock or UNDECLARED  # its clocks are counted as DEFAULT_CONVENTION's; it is in no family
        family = CONVENTION_FAMILIES.get(clock, "none")
    if isinstance(info.defaults, str):
        lr = None
    else:
        lr = float((info.defaults or {}).get("lr", FALLBACK_LR))
    return {
        "clock": clock,
        "clock_declared": bool(info.clock),
        "elementwise": info.elementwise,  # a lockstep sweep fuses only element-wise updates
        "family": family,
        "default_lr": lr,
        "lr_declared": isinstance(info.defaults, str) or "lr" in (info.defaults or {}),
        # the declared lr and --opt-arg options (a family's are read only when used)
        "defaults": describe(info.defaults),
    }


def claim_declarations(spec) -> dict:
    """What a claim declares beside its evaluator (``contracts.ClaimInfo``): axis, quantities, margin,
    the clock its mechanism needs and its threshold, the paper or note it tests."""
    return {"declared": {**dataclasses.asdict(spec.info), "axis": list(spec.info.axis)}}


def executor_declarations(spec) -> dict:
    """What an executor declares beside its factory (``contracts.ExecutorInfo``): the packages it
    needs, the command that installs them, the executor options it takes."""
    return {
        "executor": {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in dataclasses.asdict(spec.info).items()
        }
    }


def plugins_report(registry) -> dict:
    """The listing as plain data: the JSON output, and what the table shows."""
    order = list(KIND_NAMES)
    specs = sorted(registry.all_specs(), key=lambda s: (order.index(s.kind), s.name))
    return {
        "components": [
            {
                "kind": s.kind,
                "name": s.name,
                "description": s.description,
                "plugin": s.provider.plugin,
                "package": s.provider.package,
                "version": s.provider.version,
                **(optimizer_declarations(s) if s.kind == "optimizer" else {}),
                **({"fused": s.info.fused} if s.kind == "architecture" else {}),
                **(claim_declarations(s) if s.kind == "claim" else {}),
                **(executor_declarations(s) if s.kind == "executor" else {}),
            }
            for s in specs
        ],
        "conflicts": [
            {"kind": kind, "name": name, "providers": [str(s.provider) for s in claims]}
            for (kind, name), claims in registry.conflicts.items()
        ],
        "failed": [
            {"plugin": f.plugin, "package": f.package, "version": f.version, "error": f.error}
            for f in registry.failures
        ],
    }


@user_errors
def plugins_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")] = False,
) -> None:
    """List every architecture, optimizer, initializer, regularizer, metric, dataset, claim, preset,
    figure, executor and command."""
    report = plugins_report(get_registry())
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    console = prose_console()  # descriptions: wrapped at a readable width in a file or a pipe
    table = Table(title="initmem components")
    # fold, never an ellipsis: a name or version cut short on a narrow terminal is a wrong name
    table.add_column("kind", overflow="fold")
    table.add_column("name", overflow="fold")
    table.add_column("description", ratio=1, overflow="fold")
    table.add_column("plugin (package version)", overflow="fold")
    for row in report["components"]:
        description = row["description"]
        if "defaults" in row:
            clock = row["clock"] + ("" if row["clock_declared"] else ", not declared")
            description += f" [dim](clock {clock}: {row['family']}; defaults: {row['defaults']})[/dim]"
        if row.get("declared"):
            declared = row["declared"]
            clock = f"; clock {declared['clock']}" if declared["clock"] else ""
            description += f" [dim](axis {', '.join(declared['axis'])}{clock})[/dim]"
        if row.get("executor", {}).get("needs"):
            executor = row["executor"]
            needs = escape(f"{', '.join(executor['needs'])}: {executor['install']}")  # [distributed] is no markup
            description += f" [dim](needs {needs})[/dim]"
        table.add_row(row["kind"], row["name"], description, f"{row['plugin']} ({row['package']} {row['version']})")
    console.print(table)
    for conflict in report["conflicts"]:
        console.print(
            f"[red]conflict[/red]: {conflict['kind']} '{conflict['name']}' is registered by "
            + " and by ".join(conflict["providers"])
        )
    if report["failed"]:
        failed = Table(title="plugins that failed to load", title_style="red")
        for column in ("plugin", "package", "version", "error"):
            failed.add_column(column, overflow="fold")
        for row in report["failed"]:
            failed.add_row(row["plugin"], row["package"], row["version"], row["error"])
        console.print(failed)
