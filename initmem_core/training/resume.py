"""Finding where a run resumes: the newest usable checkpoint of its config, checked to be of
the same config (naming the knobs that differ when it is not), then those of unfinished runs a
later run set aside; and, for a sweep relaunch, where each killed cell would continue."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initmem_core.config import FIELDS, RunConfig
from initmem_core.errors import ConfigError
from initmem_core.training.checkpoint_format import PATTERN, UnusableCheckpoint, read_checkpoint
from initmem_core.training.checkpoint_store import PARKED, CheckpointStore


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


def resume_candidates(folder: Path, config: RunConfig, config_hash: str):
    """The store of ``config``'s run (its checkpoint ``folder``) and its newest usable checkpoint,
    then those of the unfinished runs a later run of this config set aside (``run-<run id>/``),
    newest first: the caller resumes the first whose run its store can reopen (a finished run
    cannot be). ``ConfigError`` naming the differing keys if the newest checkpoint is of another
    config, or saying there is nothing to resume."""
    store = CheckpointStore(folder, config.keep_checkpoints)
    found = store.latest()
    if found is None:
        raise ConfigError(
            f"nothing to resume: no checkpoint in {store.folder}{_nearest_hint(folder.parent, config)}; "
            "start afresh without --resume"
        )
    path, payload = found
    differences = config_differences(payload["config"], config)
    if differences or payload["config_hash"] != config_hash:
        raise ConfigError(
            f"checkpoint {path} is of a different config: {', '.join(differences) or 'config hash'}; "
            "resume with the values it was run with"
        )
    yield store, payload
    for parked in sorted(folder.glob(f"{PARKED}*/"), key=lambda p: p.stat().st_mtime, reverse=True):
        store = CheckpointStore(parked, config.keep_checkpoints)
        try:
            found = store.latest()
        except ConfigError:
            continue
        if found is not None and found[1]["config_hash"] == config_hash:
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


def find_resumable(folder: Path | None) -> ResumePoint | None:
    """The newest usable checkpoint in a config's checkpoint ``folder`` (``RunPlan.checkpoints``),
    or ``None``. For a sweep relaunch: reopen ``run_id`` and call ``run(config, ..., resume=True)``."""
    if folder is None:
        return None
    try:
        found = CheckpointStore(folder).latest(mmap=True)
    except ConfigError:
        return None
    if found is None:
        return None
    path, payload = found
    return ResumePoint(path, payload["run_id"], int(payload["epoch"]), int(payload["step"]))
