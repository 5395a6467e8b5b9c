"""What a sweep or a single run leaves on disk, and removing it (``initmem clean``, the ``clean``
command of this plugin).

A cell's checkpoints are in ``<checkpoint root>/<config hash>/`` and its lease in
``initmem-leases/<config hash>.lock`` beside the store; a sweep's report in its ``--out`` folder,
removed only when asked (``reports=True``). The tracking store is never touched. A checkpoint
folder is found by its config hash, which another sweep or run of the very same cell shares; a
sweep that holds its leases (it is running) is refused."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from initmem_core.errors import ConfigError
from initmem_core.sweep.grid import DEFAULT_OUTPUT
from initmem_core.tracking.cells import LEASES_FOLDER
from initmem_core.tracking.client import open_client
from initmem_core.tracking.records import open_sweep, search_all, sweep_name_of
from initmem_core.tracking.sweep_runs import StoredRun
from initmem_core.tracking.uris import DEFAULT_EXPERIMENT, resolve_tracking_uri, store_folder
from initmem_core.training.checkpoint_store import default_root
from initmem_core.vocabulary import CONFIG_HASH_TAG, PARENT_ROLE, PARENT_TAG, ROLE_TAG

CHECKPOINTS, LEASE, OUTPUT = "checkpoints", "lease", "report output"
#: ``--older-than``'s units, in seconds
AGE_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


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


def config_hash_of(run) -> str:
    return run.tags.get(CONFIG_HASH_TAG) or run.params.get(CONFIG_HASH_TAG) or ""


def checkpoint_folder(run, uri: str) -> Path:
    """Where ``run`` keeps its checkpoints: its ``--checkpoint-dir``, else the store's default root."""
    told = run.params.get("checkpoint_dir", "")
    return (Path(told).expanduser() if told else default_root(uri)) / config_hash_of(run)


def sweep_leftovers(
    name_or_parent_run_id: str,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    out: str | Path | None = None,
) -> tuple[str, list[Leftover]]:
    """The sweep's name and what it left on disk: each cell's checkpoint folder and lease file,
    and the report's folder (``out``, default ``initmem-output/<name>``)."""
    uri = resolve_tracking_uri(tracking_uri)
    name, children = stored_sweep(uri, experiment, name_or_parent_run_id)
    found: dict[Path, str] = {}
    for run in children:
        if config_hash := config_hash_of(run):
            found[checkpoint_folder(run, uri)] = CHECKPOINTS
            found[store_folder(uri) / LEASES_FOLDER / f"{config_hash}.lock"] = LEASE
    found[Path(out) if out else DEFAULT_OUTPUT / name] = OUTPUT
    return name, [Leftover(what, path, size_of(path)) for path, what in found.items() if path.exists()]


def stored_sweep(uri: str, experiment: str, name_or_parent_run_id: str) -> tuple[str, list[StoredRun]]:
    """An existing sweep's name and every child run of it, the sweep found by name or by its
    parent run id; ``ConfigError`` naming the sweeps there if there is none. Creates nothing."""
    _, parent, children = open_sweep(uri, experiment, name_or_parent_run_id)
    return sweep_name_of(parent), [StoredRun.of(run) for run in children]


def stored_runs(uri: str, experiment: str) -> tuple[list[StoredRun], list[StoredRun]]:
    """The runs of ``experiment`` as ``StoredRun``: the single runs (no sweep's parent nor cell)
    and the sweeps' cells. Creates no store; ``ConfigError`` when the experiment is not there."""
    client = open_client(uri, create=False)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ConfigError(f"experiment '{experiment}' does not exist in the tracking store {uri}; check --experiment")
    runs = [StoredRun.of(run) for run in search_all(client, [found.experiment_id], "")]
    runs = [run for run in runs if run.tags.get(ROLE_TAG) != PARENT_ROLE]
    return [run for run in runs if PARENT_TAG not in run.tags], [run for run in runs if PARENT_TAG in run.tags]


def parse_age(text: str) -> float:
    """``--older-than``'s value in seconds (``30m``, ``12h``, ``7d``, ``2w``); ``ConfigError`` otherwise."""
    number, unit = text.strip()[:-1], text.strip()[-1:].lower()
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in AGE_UNITS or value < 0:
        raise ConfigError(f"--older-than {text!r}: give a number and a unit, m, h, d or w (e.g. 7d, 12h)")
    return value * AGE_UNITS[unit]


def last_written(path: Path) -> float:
    """When anything in ``path`` (a folder) was last written, as a POSIX time."""
    return max((p.stat().st_mtime for p in path.rglob("*") if p.is_file()), default=path.stat().st_mtime)


def run_leftovers(
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    names: tuple[str, ...] = (),
    older_than: float | None = None,
    now: float | None = None,
) -> list[tuple[str, Leftover]]:
    """The checkpoint folders of single runs, with each run's name: those of the runs in ``names``
    (ids or names), else those last written more than ``older_than`` seconds ago, else all; never
    a folder a sweep's cell shares (its resume needs it)."""
    import time

    uri = resolve_tracking_uri(tracking_uri)
    singles, cells = stored_runs(uri, experiment)
    shared = {config_hash_of(run) for run in cells}
    if unknown := [n for n in names if not any(n in (run.run_id, run.name) for run in singles)]:
        known = sorted({run.name for run in singles if run.name})
        listing = f"; single runs there: {', '.join(known[:10])}{', ...' if len(known) > 10 else ''}" if known else ""
        raise ConfigError(
            f"no sweep or single run '{unknown[0]}' in experiment '{experiment}' (looked in {uri}){listing}"
        )
    now = time.time() if now is None else now
    found: dict[Path, str] = {}
    for run in singles:
        if not config_hash_of(run) or config_hash_of(run) in shared:
            continue
        folder = checkpoint_folder(run, uri)
        if not folder.is_dir() or folder in found:
            continue
        if names and not (run.run_id in names or run.name in names):
            continue
        if not names and older_than is not None and now - last_written(folder) < older_than:
            continue
        found[folder] = run.name or run.run_id
    return [(name, Leftover(CHECKPOINTS, folder, size_of(folder))) for folder, name in found.items()]


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


def remove(leftovers: list[Leftover]) -> None:
    import shutil

    for leftover in leftovers:
        if leftover.path.is_dir():
            shutil.rmtree(leftover.path)
        else:
            leftover.path.unlink(missing_ok=True)


def clean_sweep(
    name_or_parent_run_id: str,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    out: str | Path | None = None,
    dry_run: bool = False,
    reports: bool = False,
) -> tuple[str, list[Leftover], list[Leftover]]:
    """Remove the sweep's checkpoints and leases, and its report output only with ``reports``
    (``dry_run``: only say so). Returns its name, what was (or would be) removed and what was kept."""
    name, leftovers = sweep_leftovers(name_or_parent_run_id, tracking_uri, experiment, out)
    refuse_if_running(name, leftovers)
    kept = [] if reports else [item for item in leftovers if item.what == OUTPUT]
    removed = [item for item in leftovers if item not in kept]
    if not dry_run:
        remove(removed)
    return name, removed, kept
