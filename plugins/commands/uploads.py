"""What ``initmem sync`` does: upload what runs left in ``initmem-unsynced/`` (``tracking.pending``)
once the store answers again.

Safe to repeat: a metric whose key already has that step in the store is skipped, and a file is
deleted only once the store took all of it. Safe to run twice at once: a lock in the folder lets
one sync through at a time, and the second finds the files the first took gone. A file whose run
is not in the store is left where it is (and named), and the others are synced all the same.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from initmem_core.errors import ConfigError
from initmem_core.tracking.client import open_client
from initmem_core.tracking.login import refusal
from initmem_core.tracking.pending import PendingWrites, checked_run_id, unsynced_folder
from initmem_core.tracking.uris import resolve_tracking_uri, sqlite_path, store_folder
from initmem_core.vocabulary import CELLS_UNSYNCED_TAG, PARENT_TAG, RUNNING

SYNC_LOCK = ".sync.lock"


@dataclass
class SyncResult:
    uploaded: list[str] = field(default_factory=list)  # run ids
    metrics: int = 0  # metric values written (those already in the store are not counted)
    other_stores: list[Path] = field(default_factory=list)  # files meant for another tracking URI
    left: dict[Path, str] = field(default_factory=dict)  # files not synced -> why, in one line


def sync_folder(tracking_uri: str | None = None, folder: str | Path | None = None) -> SyncResult:
    """Upload every unsynced file meant for this store, then delete it. Safe to repeat, and to
    run twice at once."""
    from filelock import FileLock

    uri = resolve_tracking_uri(tracking_uri)
    folder = Path(folder) if folder else unsynced_folder(store_folder(uri))
    result = SyncResult()
    if not folder.is_dir() or not any(folder.glob("*.jsonl")):
        return result
    client = open_client(uri)
    with FileLock(str(folder / SYNC_LOCK)):  # another sync's files are gone once this one gets it
        for path in sorted(folder.glob("*.jsonl")):
            try:
                header, pending = read_unsynced(path)
            except ConfigError as error:
                if path.exists():  # else taken by a sync that ran meanwhile
                    result.left[path] = str(error)
                continue
            if not same_store(header.get("tracking_uri", ""), uri):
                result.other_stores.append(path)
                continue
            try:
                result.metrics += upload(client, header["run_id"], pending, uri)
            except ConfigError as error:  # its run is not in this store: the others go on
                result.left[path] = str(error)
                continue
            path.unlink()
            shutil.rmtree(folder / f"{header['run_id']}.files", ignore_errors=True)
            result.uploaded.append(header["run_id"])
    return result


def upload(client, run_id: str, pending: PendingWrites, uri: str) -> int:
    """Write ``pending`` into the run, skipping metric steps the store already holds. The status is
    set only on a run still RUNNING: one resumed and ended since keeps its own."""
    try:
        run = client.get_run(run_id)
    except Exception as error:  # a refused login is said as such, not as a missing run
        raise ConfigError(
            refusal(uri, error) or f"run {run_id} is not in {uri}; pass the --tracking-uri the run was tracked in"
        ) from None
    seen: dict[str, set[int]] = {}
    fresh = []
    for key, value, timestamp, step in pending.metrics:
        if key not in seen:
            seen[key] = {m.step for m in client.get_metric_history(run_id, key)}
        if step not in seen[key]:
            seen[key].add(step)
            fresh.append((key, value, timestamp, step))
    pending.metrics = fresh
    if pending.status and run.info.status != RUNNING:
        pending.status = None
    count = len(fresh)  # send() empties the list as the store takes it
    pending.send(client, run_id)
    _one_cell_less_unsynced(client, run.data.tags.get(PARENT_TAG))
    return count


def _one_cell_less_unsynced(client, parent_id: str | None) -> None:
    """A sweep's parent counts its cells whose writes waited (``initmem.cells_unsynced``): this one
    no longer does, so the UI stops saying so once the last is synced."""
    if not parent_id:
        return
    try:
        waiting = int(client.get_run(parent_id).data.tags.get(CELLS_UNSYNCED_TAG, "0"))
        if waiting > 0:
            client.set_tag(parent_id, CELLS_UNSYNCED_TAG, str(waiting - 1))
    except Exception:  # the parent is gone or not a sweep's: the cell itself is synced all the same
        pass


def read_unsynced(path: Path) -> tuple[dict[str, Any], PendingWrites]:
    """The ``run`` line and the pending writes of one file (``tracking.pending.spill`` wrote it);
    ``ConfigError`` if it is not ours."""
    try:
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path} is not an initmem unsynced file ({error}); move it out of the way") from None
    if not lines or lines[0].get("kind") != "run" or "run_id" not in lines[0]:
        raise ConfigError(f"{path} is not an initmem unsynced file (no run line); move it out of the way")
    try:
        run_id = checked_run_id(lines[0]["run_id"])
    except ConfigError:
        raise ConfigError(
            f"{path} names the run {lines[0]['run_id']!r}, which is not a run id; move it out of the way"
        ) from None
    copies = (path.parent / f"{run_id}.files").resolve()  # the only place its artifact copies may be
    pending = PendingWrites()
    for line in lines[1:]:
        kind = line.get("kind")
        if kind == "metric":
            pending.metrics.append((line["key"], float(line["value"]), int(line["timestamp"]), int(line["step"])))
        elif kind == "tag":
            pending.tags[line["key"]] = line["value"]
        elif kind == "text":
            pending.texts[line["artifact_file"]] = line["text"]
        elif kind == "artifact" and not (path.parent / line["path"]).resolve().is_relative_to(copies):
            raise ConfigError(
                f"{path} points an artifact outside {copies.name}/ ({line['path']}); move it out of the way"
            )
        elif kind == "artifact" and (path.parent / line["path"]).exists():
            # A copy is deleted once uploaded: a missing one was taken by an interrupted sync.
            pending.files.append((str(path.parent / line["path"]), line["artifact_path"]))
        elif kind == "status":
            pending.status = (line["status"], int(line["end_time"]))
    return lines[0], pending


def same_store(first: str, second: str) -> bool:
    """Whether two tracking URIs name one store (a SQLite file however its path is spelled)."""
    return (sqlite_path(first) or first.rstrip("/")) == (sqlite_path(second) or second.rstrip("/"))
