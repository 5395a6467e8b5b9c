"""The checkpoint file: what it holds and how it is read back without unpickling anything.

A checkpoint is one ``torch.save`` file of plain data only (tensors, dicts, lists, str, int,
float, bool, None), so ``torch.load(path, weights_only=True)`` reads it and a file from
elsewhere cannot run code. It carries a ``format`` marker, the config and its hash, and the
MLflow run id, beside the training state the loop saves (see ``training.state.snapshot``), whose
tensors are packed into one flat buffer per dtype (``tensor_packing``: ``torch.save`` costs
per tensor, and a checkpoint holds hundreds of small ones). Files are named
``ckpt-e<epochs done>-s<steps into the next epoch>.pt`` so that names sort in the order of
training.

torch is imported where it is used: a sweep process finds and names checkpoints without it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from initmem_core.config import RunConfig

FORMAT = "initmem-checkpoint/2"
HEADER = ("format", "config", "config_hash", "run_id", "epoch", "step")  # kept out of the packing: read alone
PATTERN = "ckpt-e*-s*.pt"
NAME = re.compile(r"ckpt-e(\d{6})-s(\d{6})\.pt")  # epochs done, steps into the next
REQUIRED = (*HEADER, "model", "optimizer")  # the schedule is a function of the position


def header(config: RunConfig, config_hash: str, run_id: str | None) -> dict[str, Any]:
    """What identifies a checkpoint: ours, of which config (and its hash), of which tracked run."""
    return {"format": FORMAT, "config": config.to_dict(), "config_hash": config_hash, "run_id": run_id}


class UnusableCheckpoint(Exception):
    """A checkpoint file that cannot be resumed from; the message says why, in a few words."""


def read_checkpoint(path: Path, mmap: bool = False) -> dict[str, Any]:
    """Load one checkpoint with ``weights_only=True``; ``UnusableCheckpoint`` if it is not a whole
    initmem checkpoint. ``mmap``: leave tensor data on disk (to read the header cheaply)."""
    import torch

    from initmem_core.training.tensor_packing import unpack  # lazy: imports torch

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
    ``CheckpointStore.save`` made it: ``history_columns``). Packing copies every tensor, so the
    result no longer changes with training and can be written at leisure."""
    from initmem_core.training.tensor_packing import pack  # lazy: imports torch

    header_part = {key: payload[key] for key in HEADER if key in payload}
    state = {key: value for key, value in payload.items() if key not in header_part}
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
