"""Writing checkpoints: a run's checkpoint folder, written atomically and kept two deep while it
trains (every file with ``keep="all"``), with training waiting only for what must happen before
the state moves on. A finished run keeps its last checkpoint, every one, or none (``finish``).

Saving is split: the state is captured (packed, which copies it) on the caller's thread, and the
file is encoded, written, synced and renamed on a background thread while training continues.
One write is in flight at most; ``wait()`` blocks until it is on disk and raises what went wrong
with it (a full disk, say).

A run's checkpoints live in its plan's folder (``training.plan.checkpoint_folder``). A file is
written to a temporary name, flushed to disk and renamed over, so a crash leaves either the old
file or the new one. A file that still cannot be read (truncated by a disk that lied, corrupted, or not
ours) is skipped, with a warning, for the one before it (``CheckpointStore.latest``).

torch is imported where it is used: a sweep process finds and names checkpoints without it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from initmem_core.errors import ConfigError, InitmemError, RunWarning
from initmem_core.tracking.uris import store_folder
from initmem_core.training.checkpoint_format import (
    NAME,
    PATTERN,
    UnusableCheckpoint,
    capture,
    history_columns,
    read_checkpoint,
)

CHECKPOINTS_FOLDER = "initmem-checkpoints"
PARKED = "run-"  # <config hash>/run-<run id>/: an unfinished run's checkpoint, kept when a new run starts


def default_root(tracking_uri: str | None) -> Path:
    return store_folder(tracking_uri) / CHECKPOINTS_FOLDER


class CheckpointNotWritten(InitmemError):
    """A checkpoint file could not be written (a full or read-only disk). The message names the
    file and the reason; ``last_good`` is the newest whole checkpoint of the run, if any."""

    def __init__(self, path: Path, error: OSError, last_good: Path | None):
        self.path, self.last_good = path, last_good
        self.reason = error.strerror or errno.errorcode.get(error.errno or 0, type(error).__name__)
        super().__init__(f"checkpoint {path} could not be written: {self.reason}")

    def how_to_continue(self) -> str:
        """What the user can do about it, in a few words."""
        where = f"free space in {self.path.parent} or choose another --checkpoint-dir"
        if self.last_good is None:
            return f"{where}, then run the command again"
        return f"{where}; the same command with --resume continues from {self.last_good}"


class CheckpointStore:
    """The checkpoint files of one run (one config hash)."""

    def __init__(self, folder: str | Path, keep: str = "last"):
        self.folder = Path(folder)
        self.keep = keep  # config.KEEP_CHECKPOINTS: what a finished run leaves here
        self.previous: Path | None = None  # the last good file; kept when the next one is written
        self._before_previous: Path | None = None  # deleted when the next one is written
        self._swept = False  # whether a write has cleared out the folder yet
        self._park_unfinished = False  # whether that first write keeps an unfinished run's newest file
        self._history: Any = None  # the history table of the last save, extended by the next
        self._writer: threading.Thread | None = None
        self._write_error: BaseException | None = None
        self.seconds_waited = 0.0  # what saving cost the caller: capturing, and waiting for writes

    def files(self) -> list[Path]:
        return sorted(p for p in self.folder.glob(PATTERN) if NAME.fullmatch(p.name)) if self.folder.is_dir() else []

    def save(self, payload: dict[str, Any]) -> Path:
        """Capture ``payload`` now (its tensors may change as soon as this returns) and write it
        in the background; returns the path it will have. Waits for the previous write first."""
        self.wait()
        began = time.perf_counter()
        path = self.folder / f"ckpt-e{payload['epoch']:06d}-s{payload['step']:06d}.pt"
        if "history" in payload:  # append-only: convert only the rows added since the last save
            self._history = history_columns(payload["history"], self._history)
            payload = {**payload, "history": self._history}
        captured = capture(payload)
        self._writer = threading.Thread(
            target=self._write_in_background, args=(path, captured), name=f"initmem-checkpoint-{path.name}"
        )
        self._writer.start()
        self.seconds_waited += time.perf_counter() - began
        return path

    def wait(self) -> None:
        """Return once the last checkpoint saved is on disk; raise what stopped it getting there."""
        if self._writer is not None:
            began = time.perf_counter()
            self._writer.join()
            self._writer = None
            self.seconds_waited += time.perf_counter() - began
        if self._write_error is not None:
            error, self._write_error = self._write_error, None
            raise error

    def _write_in_background(self, path: Path, captured: dict[str, Any]) -> None:
        try:
            self._write(path, captured)
        except BaseException as error:  # handed to the training thread by wait()
            self._write_error = error

    def _write(self, path: Path, captured: dict[str, Any]) -> None:
        """Write atomically, then delete every file but this one and the previous good one."""
        import torch

        temporary = self.folder / f".{path.name}.{os.getpid()}.tmp"
        encoded = io.BytesIO()  # half the CPU time of torch.save into a file object, which writes in pieces
        torch.save(captured, encoded)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(temporary, "wb") as handle:
                handle.write(encoded.getbuffer())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
            _fsync_folder(self.folder)
        except OSError as error:  # a full or read-only disk: no partial file stays behind
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise CheckpointNotWritten(path, error, self.previous) from None
        if self._swept:  # only the file before the previous one is left over
            stale = [self._before_previous] if self._before_previous else []
        else:  # the first write here: whatever earlier runs or crashes left too
            earlier = [old for old in self.files() if old != path]
            if self._park_unfinished and earlier:
                earlier = earlier[:-1] if _park(earlier[-1]) else earlier
            stale = [*earlier, *self.folder.glob(".ckpt-*.tmp")]
            self._swept = True
        for old in stale:
            if old not in (path, self.previous) and (self.keep != "all" or old.name.startswith(".")):
                old.unlink(missing_ok=True)
        self._before_previous, self.previous = self.previous, path

    def finish(self) -> None:
        """The run finished: keep what ``keep`` says, the newest file (what ``--resume`` of a longer
        horizon starts from), every file, or none (and the folder, when nothing else is in it).
        Parked files of other runs (``run-<id>/``) stay."""
        self.wait()
        if self.keep == "all":
            return
        kept = self.previous if self.keep == "last" else None
        for path in self.files():
            if path != kept:
                path.unlink(missing_ok=True)
        if kept is None:
            self.previous = None
            with contextlib.suppress(OSError):
                self.folder.rmdir()  # only when empty

    def start_fresh(self, epochs: int, ended: Any = None) -> None:
        """A new run of this config: its first save replaces the files here (not before, so that
        stopping it at once leaves an earlier killed run resumable). An unfinished run's newest
        file is kept, in ``run-<its run id>/``, where ``--resume`` still finds it. Warns then.
        ``ended(history)``: why a run stops where its history ends, if it does (``--patience``)."""
        self.previous, self._before_previous, self._swept, self._history = None, None, False, None
        files = self.files()
        newest = NAME.fullmatch(files[-1].name) if files else None  # files() lists only names NAME matches
        done = int(newest.group(1)) if newest else epochs
        with contextlib.suppress(UnusableCheckpoint):  # an unreadable file: unfinished, as before
            if newest and done < epochs and ended and ended(read_checkpoint(files[-1], mmap=True)["history"]):
                done = epochs
        self._park_unfinished = done < epochs
        if done < epochs:
            warnings.warn(
                f"{self.folder} holds checkpoints of an unfinished run of this config (epoch {done} "
                f"of {epochs}); this new run moves its newest into {PARKED}<run id>/ at its first "
                "checkpoint, and --resume continues that run once this one has finished",
                RunWarning,
                stacklevel=2,
            )

    def latest(self, mmap: bool = False) -> tuple[Path, dict[str, Any]] | None:
        """The newest usable checkpoint, or ``None`` if there is none at all. Unusable files are
        skipped with one warning each; ``ConfigError`` if every file is unusable."""
        reasons = []
        for path in reversed(self.files()):
            try:
                payload = read_checkpoint(path, mmap)
            except UnusableCheckpoint as error:
                reasons.append(str(error))
                continue
            for reason in reasons:
                warnings.warn(f"checkpoint {reason}; using {path.name} instead", RunWarning, stacklevel=2)
            self.previous = path
            return path, payload
        if reasons:
            raise ConfigError(
                f"no usable checkpoint in {self.folder}: {'; '.join(reasons)}; start afresh without --resume"
            )
        return None


def _park(path: Path) -> bool:
    """Move an unfinished run's checkpoint into ``run-<its run id>/`` beside it; whether it moved."""
    try:
        run_id = read_checkpoint(path, mmap=True)["run_id"]
    except UnusableCheckpoint:
        return False
    if not isinstance(run_id, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", run_id):
        return False  # a run id that cannot name a folder: the file goes, as before
    parked = path.parent / f"{PARKED}{run_id}"
    parked.mkdir(exist_ok=True)
    os.replace(path, parked / path.name)
    return True


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX; Windows has no directory handles to sync)."""
    if os.name != "posix":
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
