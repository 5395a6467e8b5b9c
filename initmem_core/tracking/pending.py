"""Writes the tracking store has not taken yet: held in memory and retried with backoff while a
run trains, and left in a local file if the run ends first (``initmem sync``, the commands
plugin's, reads it back and uploads it).

The file is ``initmem-unsynced/<run id>.jsonl`` beside the SQLite database (in the current folder
for a server), one JSON object per line: a ``run`` line naming the store and the run, then
``metric`` (key, value, timestamp, step), ``tag``, ``text``, ``artifact`` (a copy kept in
``<run id>.files/``) and ``status`` lines. Uploading it twice adds nothing the second time: a
metric whose key already has that step in the store is skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from initmem_core.errors import ConfigError
from initmem_core.tracking.writing import log_in_batches

UNSYNCED_FOLDER = "initmem-unsynced"
#: What a run id may look like where it names a file (MLflow's are 32 hex digits): a crafted one
#: such as ``../../x`` must not place or delete files outside the unsynced folder.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
FIRST_RETRY_S, LONGEST_RETRY_S = 1.0, 300.0


@dataclass
class PendingWrites:
    """What one run still owes the store, oldest first."""

    metrics: list[tuple[str, float, int, int]] = field(default_factory=list)  # key, value, timestamp ms, step
    tags: dict[str, str] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)  # artifact file -> text
    files: list[tuple[str, str | None]] = field(default_factory=list)  # local copy, artifact path
    status: tuple[str, int] | None = None  # status, end time ms

    def __bool__(self) -> bool:
        return self.count() > 0

    def count(self) -> int:
        """How many values wait: metric values, tags, texts, files and the final status."""
        return len(self.metrics) + len(self.tags) + len(self.texts) + len(self.files) + bool(self.status)

    def send(self, client, run_id: str) -> None:
        """Write everything, dropping each part as soon as the store has taken it, so a failure
        half-way never sends a part twice. The status goes last: a run ends after its data."""
        from mlflow.entities import Metric, RunTag

        def drop_metrics(count: int) -> None:
            del self.metrics[:count]

        def drop_tags(count: int) -> None:
            for key in list(self.tags)[:count]:
                del self.tags[key]

        log_in_batches(
            client, run_id, "metrics", [Metric(k, v, t, s) for k, v, t, s in self.metrics], taken=drop_metrics
        )
        log_in_batches(client, run_id, "tags", [RunTag(k, v) for k, v in self.tags.items()], taken=drop_tags)
        while self.texts:
            name, text = next(iter(self.texts.items()))
            client.log_text(run_id, text, name)
            del self.texts[name]
        while self.files:
            path, artifact_path = self.files[0]
            client.log_artifact(run_id, path, artifact_path)
            discard_copy(Path(path))
            del self.files[0]
        if self.status:
            status, end_time = self.status
            client.set_terminated(run_id, status, end_time)
            self.status = None


class Backoff:
    """When to try a failing store again: 1 s after the first failure, doubling up to 5 minutes."""

    def __init__(self) -> None:
        self.delay, self.next_try = 0.0, 0.0

    def due(self) -> bool:
        return time.monotonic() >= self.next_try

    def failed(self) -> None:
        self.delay = min(LONGEST_RETRY_S, max(FIRST_RETRY_S, 2 * self.delay))
        self.next_try = time.monotonic() + self.delay

    def succeeded(self) -> None:
        self.delay, self.next_try = 0.0, 0.0

    @property
    def failing(self) -> bool:
        return self.delay > 0


def unsynced_folder(store_folder: Path) -> Path:
    return store_folder / UNSYNCED_FOLDER


def checked_run_id(run_id: object) -> str:
    """``run_id`` if it can name a file safely; a ``ConfigError`` otherwise."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        raise ConfigError(f"run id {run_id!r} cannot name a file (letters, digits, _ and - only); refusing it")
    return run_id


def keep_copy(folder: Path, run_id: str, local_path: str | Path) -> str:
    """Copy an artifact the store did not take, since its source may be a temporary file. The
    copy is whole or absent: written under a temporary name and renamed (``OSError`` otherwise)."""
    source = Path(local_path)
    target = folder / f"{checked_run_id(run_id)}.files" / uuid.uuid4().hex[:8] / source.name
    temporary = target.with_name(f".{target.name}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, temporary)
        os.replace(temporary, target)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        for made in (target.parent, target.parent.parent):  # the folders made for it, if empty
            with contextlib.suppress(OSError):
                made.rmdir()
        raise
    return str(target)


def discard_copy(path: Path) -> None:
    """Delete an uploaded copy, and the folders ``keep_copy`` made for it once they are empty."""
    path.unlink()
    for folder in list(path.parents)[:3]:  # <random>/, <run id>.files/, initmem-unsynced/
        try:
            folder.rmdir()
        except OSError:  # not empty: other writes are still waiting there
            return


def keep_for_sync(
    pending: PendingWrites, folder: Path, run_id: str, uri: str, not_kept: list[str], sync_when: str
) -> tuple[str, Path | None]:
    """Spill what the store did not take into ``folder`` for ``initmem sync``; returns what the
    run's ``unsynced`` says (empty: nothing waits) and the file written (``None``: none). What the
    folder refuses too joins ``not_kept`` (what is lost), which the message then names."""
    unsynced, path = "", None
    if pending:
        count = pending.count()
        ended = ", its end included" if pending.status else ""
        try:
            path = spill(pending, folder, run_id, uri)
        except OSError as error:
            not_kept.insert(0, f"{count} write(s){ended} ({error.strerror or error})")
        else:
            unsynced = f"{count} write(s){ended} wait in {path}: run `initmem sync --tracking-uri {uri}` {sync_when}"
    if not_kept:
        kept = f"; {unsynced}" if unsynced else ""
        unsynced = (
            f"tracking store {uri} and {folder} both refused {', '.join(not_kept)}: "
            f"not recorded, and the store shows the run RUNNING{kept}"
        )
    return unsynced, path


def spill(pending: PendingWrites, folder: Path, run_id: str, tracking_uri: str) -> Path:
    """Append what is still pending to ``<folder>/<run_id>.jsonl`` (written whole, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{checked_run_id(run_id)}.jsonl"
    lines: list[dict[str, Any]] = (
        [] if path.exists() else [{"kind": "run", "run_id": run_id, "tracking_uri": tracking_uri}]
    )
    lines += [{"kind": "metric", "key": k, "value": v, "timestamp": t, "step": s} for k, v, t, s in pending.metrics]
    lines += [{"kind": "tag", "key": k, "value": v} for k, v in pending.tags.items()]
    lines += [{"kind": "text", "artifact_file": name, "text": text} for name, text in pending.texts.items()]
    lines += [
        {"kind": "artifact", "path": str(Path(p).relative_to(folder)), "artifact_path": a} for p, a in pending.files
    ]
    if pending.status:
        lines.append({"kind": "status", "status": pending.status[0], "end_time": pending.status[1]})
    text = (path.read_text() if path.exists() else "") + "".join(json.dumps(line) + "\n" for line in lines)
    temporary = path.with_suffix(".jsonl.tmp")
    try:  # whole or not at all: a full disk leaves the file as it was, and no temporary one
        with open(temporary, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
            folder.rmdir()  # if this made it and it is empty
        raise
    return path
