"""Checkpoints: written atomically, kept two deep, read back without unpickling anything.

A checkpoint is one ``torch.save`` file of plain data only (tensors, dicts, lists, str, int,
float, bool, None), so ``torch.load(path, weights_only=True)`` reads it and a file from
elsewhere cannot run code. It carries a ``format`` marker, the config and its hash, and the
MLflow run id, beside the training state the loop saves (see ``training.state.snapshot``), whose
tensors are packed into one flat buffer per dtype (``tensor_packing``: ``torch.save`` costs
per tensor, and a checkpoint holds hundreds of small ones).

Saving is split so that training waits only for what must happen before the state moves on:
the state is captured (packed, which copies it) on the caller's thread, and the file is encoded,
written, synced and renamed on a background thread while training continues. One write is in
flight at most; ``wait()`` blocks until it is on disk and raises what went wrong with it (a
full disk, say).

A run's checkpoints live in ``<root>/<config hash>/`` (root: ``--checkpoint-dir``, else
``initmem-checkpoints`` beside the SQLite database or in the current folder), named
``ckpt-e<epochs done>-s<steps into the next epoch>.pt`` so that names sort in the order of
training. A file is written to a temporary name, flushed to disk and renamed over, so a crash
leaves either the old file or the new one. A file that still cannot be read (truncated by a
disk that lied, corrupted, or not ours) is skipped, with a warning, for the one before it.

torch is imported where it is used: a sweep process finds and names checkpoints without it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import random
import re
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initmem_core.config import FIELDS, RunConfig
from initmem_core.errors import ConfigError, InitmemError, RunWarning

FORMAT = "initmem-checkpoint/2"
HEADER = ("format", "config", "config_hash", "run_id", "epoch", "step")  # kept out of the packing: read alone
CHECKPOINTS_FOLDER = "initmem-checkpoints"
PARKED = "run-"  # <config hash>/run-<run id>/: an unfinished run's checkpoint, kept when a new run starts
PATTERN = "ckpt-e*-s*.pt"
NAME = re.compile(r"ckpt-e(\d{6})-s(\d{6})\.pt")  # epochs done, steps into the next
REQUIRED = ("format", "config", "config_hash", "run_id", "epoch", "step", "model", "optimizer", "scheduler")


def default_root(tracking_uri: str | None) -> Path:
    from initmem_core.tracking.uris import store_folder

    return store_folder(tracking_uri) / CHECKPOINTS_FOLDER


def header(config: RunConfig, run_id: str | None) -> dict[str, Any]:
    """What identifies a checkpoint: ours, of which config, of which tracked run."""
    return {"format": FORMAT, "config": config.to_dict(), "config_hash": config.config_hash(), "run_id": run_id}


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


class UnusableCheckpoint(Exception):
    """A checkpoint file that cannot be resumed from; the message says why, in a few words."""


def read_checkpoint(path: Path, mmap: bool = False) -> dict[str, Any]:
    """Load one checkpoint with ``weights_only=True``; ``UnusableCheckpoint`` if it is not a whole
    initmem checkpoint. ``mmap``: leave tensor data on disk (to read the header cheaply)."""
    import torch

    from initmem_core.training.tensor_packing import unpack

    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as error:  # truncated zip, foreign pickle, random bytes
        reason = " ".join(str(error).split())[:120] or type(error).__name__
        raise UnusableCheckpoint(f"{path.name} cannot be read ({reason})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise UnusableCheckpoint(f"{path.name} is not an initmem checkpoint of this version ({FORMAT})")
    try:
        payload.update(unpack(payload.pop("packed"), copy=not mmap))
        payload["history"] = history_rows(payload.get("history", []))
    except Exception as error:  # damaged layout or buffers, or none at all
        raise UnusableCheckpoint(f"{path.name} has damaged tensors ({type(error).__name__})") from None
    missing = [key for key in REQUIRED if key not in payload]
    if missing:
        raise UnusableCheckpoint(f"{path.name} lacks {', '.join(missing)}")
    return payload


def capture(payload: dict[str, Any]) -> dict[str, Any]:
    """What goes into the file: the header as it is, the training state packed (the history as
    rows, or already as ``history_columns``). Packing copies every tensor, so the result no longer
    changes with training and can be written at leisure."""
    from initmem_core.training.tensor_packing import pack

    header_part = {key: payload[key] for key in HEADER if key in payload}
    state = {key: value for key, value in payload.items() if key not in header_part}
    if isinstance(state.get("history"), list):
        state["history"] = history_columns(state["history"])
    return {**header_part, "format": FORMAT, "packed": pack(state)}


def history_columns(rows: list[dict[str, Any]], before: Any = None) -> dict[str, Any] | list[dict[str, Any]]:
    """The epoch rows as one float64 table (exact for Python floats and ints below 2**53): a long
    run's history, pickled row by row, would cost a Python object per value at every checkpoint.
    Rows holding anything but numbers are kept as they are. ``before``: this function's table of
    the first rows of the same append-only history; only the rows after them are converted."""
    import torch

    if not (isinstance(before, dict) and before["rows"] <= len(rows)):
        before = None
    new = rows[before["rows"] :] if before else rows
    if not all(type(value) in (int, float) for row in new for value in row.values()):
        return rows
    keys = list(dict.fromkeys([*(before["keys"] if before else []), *(key for row in new for key in row)]))
    if not keys:
        return rows
    shape = (len(new), len(keys))
    values = torch.tensor([[float(row.get(key, 0.0)) for key in keys] for row in new], dtype=torch.float64).reshape(
        shape
    )
    present = torch.tensor([[key in row for key in keys] for row in new], dtype=torch.bool).reshape(shape)
    integer = [all(type(row[key]) is int for row in new if key in row) for key in keys]
    if before:  # earlier rows lack any key that appeared since: absent there
        added = len(keys) - len(before["keys"])
        values = torch.cat([torch.cat([before["values"], values.new_zeros(before["rows"], added)], 1), values])
        present = torch.cat([torch.cat([before["present"], present.new_zeros(before["rows"], added)], 1), present])
        integer = [old and now for old, now in zip([*before["integer"], *[True] * added], integer)]
    return {"rows": len(rows), "keys": keys, "values": values, "present": present, "integer": integer}


def history_rows(history: dict[str, Any] | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``history_columns`` undone: the same rows, keys and value types."""
    if isinstance(history, list):
        return history
    keys, integer = history["keys"], history["integer"]
    return [
        {
            key: int(value) if integer[j] else value
            for j, (key, value, here) in enumerate(zip(keys, values, present))
            if here
        }
        for values, present in zip(
            history["values"].reshape(-1, len(keys)).tolist(), history["present"].reshape(-1, len(keys)).tolist()
        )
    ]


class CheckpointStore:
    """The checkpoint files of one run (one config hash)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
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
            if old not in (path, self.previous):
                old.unlink(missing_ok=True)
        self._before_previous, self.previous = self.previous, path

    def start_fresh(self, epochs: int) -> None:
        """A new run of this config: its first save replaces the files here (not before, so that
        stopping it at once leaves an earlier killed run resumable). An unfinished run's newest
        file is kept, in ``run-<its run id>/``, where ``--resume`` still finds it. Warns then."""
        self.previous, self._before_previous, self._swept, self._history = None, None, False, None
        files = self.files()
        done = int(NAME.fullmatch(files[-1].name).group(1)) if files else epochs
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


def config_differences(saved: dict[str, Any], config: RunConfig) -> list[str]:
    """``key (saved -> now)`` for every hashed knob that differs."""
    now = config.to_dict()
    # A knob added since the checkpoint was written (``--until``) had its default then.
    saved = {**{key: f.default for key, f in FIELDS.items() if f.metadata["hashed_when_set"]}, **saved}
    return [
        f"{key} ({saved.get(key)!r} -> {now[key]!r})"
        for key, f in FIELDS.items()
        if f.metadata["hashed"] and saved.get(key) != now[key]
    ]


def load_for_resume(root: Path, config: RunConfig) -> tuple[CheckpointStore, dict[str, Any]]:
    """The store of ``config``'s run and its newest usable checkpoint; ``ConfigError`` naming the
    differing keys if the checkpoint is of another config, or saying there is nothing to resume."""
    store = CheckpointStore(root / config.config_hash())
    found = store.latest()
    if found is None:
        raise ConfigError(
            f"nothing to resume: no checkpoint in {store.folder}{_nearest_hint(root, config)}; "
            "start afresh without --resume"
        )
    path, payload = found
    differences = config_differences(payload["config"], config)
    if differences or payload["config_hash"] != config.config_hash():
        raise ConfigError(
            f"checkpoint {path} is of a different config: {', '.join(differences) or 'config hash'}; "
            "resume with the values it was run with"
        )
    return store, payload


def resume_candidates(root: Path, config: RunConfig):
    """``load_for_resume``'s store and checkpoint, then those of the unfinished runs a later run of
    this config set aside (``run-<run id>/``), newest first: the caller resumes the first whose
    run its store can reopen (a finished run cannot be)."""
    yield load_for_resume(root, config)
    folder = root / config.config_hash()
    for parked in sorted(folder.glob(f"{PARKED}*/"), key=lambda p: p.stat().st_mtime, reverse=True):
        store = CheckpointStore(parked)
        try:
            found = store.latest()
        except ConfigError:
            continue
        if found is not None and found[1]["config_hash"] == config.config_hash():
            yield store, found[1]


def _nearest_hint(root: Path, config: RunConfig) -> str:
    """Name what changed since the most recent checkpoint under ``root``: usually the user meant it."""
    newest = max(root.glob(f"*/{PATTERN}"), key=lambda p: p.stat().st_mtime, default=None)
    if newest is None:
        return ""
    try:
        differences = config_differences(read_checkpoint(newest, mmap=True)["config"], config)
    except UnusableCheckpoint:
        return ""
    return f" (the latest checkpoint in {root} differs in {', '.join(differences)})"


@dataclass
class ResumePoint:
    """Where a killed run would continue: its run id and the position of its newest checkpoint."""

    path: Path
    run_id: str | None
    epoch: int  # epochs done
    step: int  # steps done into the next epoch


def find_resumable(config_hash: str, checkpoint_root: str | Path) -> ResumePoint | None:
    """The newest usable checkpoint of a config, or ``None``. For a sweep relaunch: reopen
    ``run_id`` and call ``run(config, ..., resume=True)``."""
    try:
        found = CheckpointStore(Path(checkpoint_root) / config_hash).latest(mmap=True)
    except ConfigError:
        return None
    if found is None:
        return None
    path, payload = found
    return ResumePoint(path, payload["run_id"], int(payload["epoch"]), int(payload["step"]))


# -- random number generators, as tensors so that weights_only loading reads them --------------


def capture_rng(device: Any = None) -> dict[str, Any]:
    """Every generator a run draws from: torch's CPU one, Python's, NumPy's, and the CUDA one of
    the run's own ``device`` only (other GPUs of the process are not the run's, and a resume may
    see fewer of them)."""
    import numpy
    import torch

    version, state, gauss = random.getstate()
    kind, keys, position, has_gauss, cached = numpy.random.get_state()
    captured = {
        "torch": torch.get_rng_state(),
        "python": {"version": version, "state": torch.tensor(state, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype("int64")),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
    }
    if device is not None and device.type == "cuda" and torch.cuda.is_initialized():
        captured["cuda"] = torch.cuda.get_rng_state(device)
    return captured


def restore_rng(captured: dict[str, Any], device: Any = None) -> None:
    """Put ``capture_rng``'s generators back; the CUDA state goes to the resumed run's own
    ``device``, whichever GPU that is (a run resumed on the CPU has no CUDA generator to set).
    A checkpoint from before this format holds every GPU's state by index: the run's was the
    current device's, GPU 0 of its process unless it said otherwise."""
    import numpy
    import torch

    torch.set_rng_state(captured["torch"])
    python = captured["python"]
    random.setstate((python["version"], tuple(python["state"].tolist()), python["gauss"]))
    state = captured["numpy"]
    numpy.random.set_state(
        (state["kind"], state["keys"].numpy().astype("uint32"), state["position"], state["has_gauss"], state["cached"])
    )
    cuda = captured.get("cuda")
    if cuda is None or device is None or device.type != "cuda":
        return
    if isinstance(cuda, (list, tuple)):  # the earlier format: one state per visible GPU
        if not cuda:
            return
        cuda = cuda[0]
    torch.cuda.set_rng_state(cuda, device)
