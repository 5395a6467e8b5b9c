"""``initmem --version``: initmem's version, those of the packages a run stands on, and the device
a run would train on. Versions come from the installed packages' metadata (cheap); only the
device needs torch, imported when the option is given."""

from __future__ import annotations

import platform

import typer

from initmem_core.tracking.provenance import installed_version

#: What a run stands on, in the order printed.
PACKAGES = ("torch", "mlflow", "timm", "pluggy")


def installed(package: str) -> str:
    return installed_version(package, "not installed")


def device_text() -> str:
    """The device ``--device auto`` picks here, named when it is a GPU."""
    import torch

    from initmem_core.training.setup import resolve_device  # lazy: imports torch

    device = resolve_device("auto")
    return f"cuda ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else device.type


def version_text() -> str:
    return (
        f"initmem {installed('initmem')} (Python {platform.python_version()})\n"
        + ", ".join(f"{package} {installed(package)}" for package in PACKAGES)
        + f"; device: {device_text()}"
    )


def show_version(value: bool) -> None:
    """Eager option callback: print the versions and stop before any command runs."""
    if value:
        typer.echo(version_text())
        raise typer.Exit()
