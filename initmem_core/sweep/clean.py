"""What a sweep leaves on disk once it is done, and removing it: ``initmem clean NAME``.

A sweep's cells keep checkpoints in ``<checkpoint root>/<config hash>/`` (``--checkpoint-dir``, else
``initmem-checkpoints/`` beside the SQLite store), take leases in ``initmem-leases/<config hash>.lock``
beside the store, and the sweep writes its report into ``--out`` (``initmem-output/<name>/`` by
default). The tracking store itself (runs, metrics, the report on the parent run) is never touched.

A cell is found by its config hash, which another sweep running the very same cell shares: its
checkpoint folder is that sweep's too. A sweep whose leases are held (it is running) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from initmem_core.errors import ConfigError
from initmem_core.sweep.grid import DEFAULT_OUTPUT
from initmem_core.tracking.cells import LEASES_FOLDER
from initmem_core.tracking.sweep_runs import stored_sweep
from initmem_core.tracking.uris import DEFAULT_EXPERIMENT, resolve_tracking_uri, store_folder
from initmem_core.training.checkpoint_store import default_root
from initmem_core.vocabulary import CONFIG_HASH_TAG

CHECKPOINTS, LEASE, OUTPUT = "checkpoints", "lease", "report output"


@dataclass(frozen=True)
class Leftover:
    """One thing on disk a sweep left: what it is, where, and its size in bytes."""

    what: str
    path: Path
    size: int


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def human_size(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"  # unreachable: GB is the last unit


def sweep_leftovers(
    name_or_parent_run_id: str,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    out: str | Path | None = None,
) -> tuple[str, list[Leftover]]:
    """The sweep's name and what it left on disk: each cell's checkpoint folder, each cell's lease
    file, and the report's output folder (``out``, default ``initmem-output/<name>``)."""
    uri = resolve_tracking_uri(tracking_uri)
    name, children = stored_sweep(uri, experiment, name_or_parent_run_id)
    found: dict[Path, str] = {}
    for run in children:
        config_hash = run.tags.get(CONFIG_HASH_TAG) or run.params.get(CONFIG_HASH_TAG)
        if not config_hash:
            continue
        told = run.params.get("checkpoint_dir", "")
        root = Path(told).expanduser() if told else default_root(uri)
        found[root / config_hash] = CHECKPOINTS
        found[store_folder(uri) / LEASES_FOLDER / f"{config_hash}.lock"] = LEASE
    found[Path(out) if out else DEFAULT_OUTPUT / name] = OUTPUT
    return name, [Leftover(what, path, size_of(path)) for path, what in found.items() if path.exists()]


def refuse_if_running(name: str, leftovers: list[Leftover]) -> None:
    """``ConfigError`` when a lease of the sweep is held: a live sweep process owns that cell."""
    from filelock import FileLock, Timeout

    for leftover in leftovers:
        if leftover.what != LEASE:
            continue
        lock = FileLock(leftover.path, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise ConfigError(
                f"sweep '{name}' is running (its cell lease {leftover.path.name} is held); "
                "stop it, or wait for it to end, before cleaning it"
            ) from None
        lock.release()


def remove(leftovers: list[Leftover]) -> int:
    """Delete every leftover; returns the bytes freed."""
    import shutil

    for leftover in leftovers:
        if leftover.path.is_dir():
            shutil.rmtree(leftover.path)
        else:
            leftover.path.unlink(missing_ok=True)
    return sum(leftover.size for leftover in leftovers)


def clean_sweep(
    name_or_parent_run_id: str,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    out: str | Path | None = None,
    dry_run: bool = False,
) -> tuple[str, list[Leftover]]:
    """Remove what the sweep left on disk (``dry_run``: only say it); returns its name and the leftovers."""
    name, leftovers = sweep_leftovers(name_or_parent_run_id, tracking_uri, experiment, out)
    refuse_if_running(name, leftovers)
    if not dry_run:
        remove(leftovers)
    return name, leftovers
