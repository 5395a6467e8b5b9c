"""A sweep as one file: everything the report and the claims read, readable with no MLflow.

``export_sweep`` reads a sweep from the tracking store (``records.load_sweep_records``: the same
records a report is built from) and ``write_export`` writes them as gzip-compressed JSON;
``read_export`` gives them back, equal field by field, so a report built from the file is the
report built from the store, byte for byte (``initmem report --from FILE``). The reader imports
neither MLflow nor torch: a reader needs Python, numpy and initmem's core.

The layout (``FORMAT``, version ``VERSION``)::

    {"format": "initmem-sweep-export", "version": 1,
     "sweep": {"name", "parent_run_id", "experiment", "parent_params", "parent_tags",
               "started_ms", "ended_ms", "exported_at", "initmem_version"},
     "cells": [{<every field of CellRecord>: value}, ...]}

Each cell carries every field of ``records.CellRecord``, walked with ``dataclasses.fields`` so a
field added later travels too: its config as a mapping (``RunConfig.to_dict``), its per-example
correctness packed one bit per example (``correct_sets.packed``), every other field as plain
JSON. A missing or non-finite float is written as JSON's ``NaN``/``Infinity`` (as Python's json
reads them). A file of a newer version is refused in one line, never half-read.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import tempfile
import typing
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from initmem_core.config import from_mapping
from initmem_core.errors import ConfigError
from initmem_core.tracking.correct_sets import packed, unpacked
from initmem_core.tracking.provenance import installed_version
from initmem_core.tracking.records import CellRecord, latest_per_cell, open_sweep, record_from_run, sweep_name_of
from initmem_core.tracking.uris import DEFAULT_EXPERIMENT, resolve_tracking_uri

FORMAT = "initmem-sweep-export"
#: Bumped when a reader of the previous version would misread the file; an added field of
#: ``CellRecord`` needs no new version (an older file reads with the field at its default).
VERSION = 1
#: The conventional name of a sweep's export in the repository: docs/results/<sweep>.json.gz.
SUFFIX = ".json.gz"


@dataclass
class SweepExport:
    """A sweep as exported: its name, where it came from and one record per cell (in the order
    the store gave them, which is the order the report reads them in)."""

    name: str
    records: list[CellRecord]
    parent_run_id: str = ""
    experiment: str = ""
    #: the parent run's params (the sweep's grid) and its tags but MLflow's own
    parent_params: dict[str, str] = field(default_factory=dict)
    parent_tags: dict[str, str] = field(default_factory=dict)
    #: the first cell's start and the last cell's end, ms since the epoch as MLflow keeps them (0: unknown)
    started_ms: int = 0
    ended_ms: int = 0
    exported_at: str = ""
    initmem_version: str = ""

    @property
    def wall_seconds(self) -> float | None:
        """From the first cell's start to the last one's end (pauses between launches included)."""
        return (self.ended_ms - self.started_ms) / 1000 if self.started_ms and self.ended_ms else None

    @property
    def datasets(self) -> list[str]:
        """The datasets the cells trained on (``config.data``), in their first order."""
        return list(dict.fromkeys(r.config.data for r in self.records))


# -- the store to a SweepExport ---------------------------------------------------------------


def export_sweep(name_or_parent_run_id: str, tracking_uri: str | None = None, experiment: str = "") -> SweepExport:
    """Read sweep ``name_or_parent_run_id`` from the store (MLflow is imported when the client opens)."""
    experiment = experiment or DEFAULT_EXPERIMENT
    client, parent, children = open_sweep(resolve_tracking_uri(tracking_uri), experiment, name_or_parent_run_id)
    ended = [r for r in children if r.info.end_time]
    return SweepExport(
        name=sweep_name_of(parent),
        records=[record_from_run(client, run) for run in latest_per_cell(children)],
        parent_run_id=parent.info.run_id,
        experiment=experiment,
        parent_params=dict(parent.data.params),
        parent_tags={k: v for k, v in parent.data.tags.items() if not k.startswith("mlflow.") or k in KEPT_MLFLOW_TAGS},
        started_ms=min((r.info.start_time for r in ended), default=0) or 0,
        ended_ms=max((r.info.end_time for r in ended), default=0) or 0,
        exported_at=datetime.now(UTC).isoformat(timespec="seconds"),
        initmem_version=installed_version("initmem", ""),
    )


#: MLflow's own tags an export keeps: which code made the sweep (a confirmatory export must show it
#: ran from the commit that froze docs/PREREGISTRATION.md). The rest are MLflow's bookkeeping.
KEPT_MLFLOW_TAGS = ("mlflow.source.git.commit", "mlflow.source.name")


# -- a SweepExport to and from JSON -------------------------------------------------------------

#: Fields of CellRecord that need more than plain JSON: (to JSON, from JSON).
_CODECS: dict[str, tuple[typing.Callable[[Any], Any], typing.Callable[[Any], Any]]] = {
    "config": (lambda config: config.to_dict(), lambda data: from_mapping(data, "an exported cell's config")),
    "test_correct": (
        lambda bits: None if bits is None else packed(bits),
        lambda data: None if data is None else unpacked(data),
    ),
}


def _restore(value: Any, hint: Any) -> Any:
    """A JSON value back to the type ``hint`` names: lists that were tuples become tuples again,
    through lists and dicts (``list[tuple[int, float]]``, ``dict[str, list[tuple[...]]]``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and isinstance(value, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_restore(v, args[0]) for v in value)
        return tuple(_restore(v, a) for v, a in zip(value, args)) if args else tuple(value)
    if origin is list and isinstance(value, list) and args:
        return [_restore(v, args[0]) for v in value]
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return {k: _restore(v, args[1]) for k, v in value.items()}
    return value


def record_to_json(record: CellRecord) -> dict[str, Any]:
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(CellRecord)}
    return {name: _CODECS[name][0](value) if name in _CODECS else value for name, value in values.items()}


def record_from_json(data: dict[str, Any]) -> CellRecord:
    """The record ``record_to_json`` wrote; a field this version does not know is refused."""
    hints = typing.get_type_hints(CellRecord)
    known = {f.name for f in dataclasses.fields(CellRecord)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"an exported cell has field(s) {', '.join(unknown)} this initmem does not know; "
            "read the file with the initmem that wrote it, or a newer one"
        )
    values = {
        name: _CODECS[name][1](value) if name in _CODECS else _restore(value, hints[name])
        for name, value in data.items()
    }
    return CellRecord(**values)


def to_json_text(export: SweepExport) -> str:
    sweep = {f.name: getattr(export, f.name) for f in dataclasses.fields(SweepExport) if f.name != "records"}
    body = {"format": FORMAT, "version": VERSION, "sweep": sweep, "cells": [record_to_json(r) for r in export.records]}
    return json.dumps(body, separators=(",", ":"))


def from_json_text(text: str, source: str = "the export") -> SweepExport:
    try:
        body = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{source} is not an initmem export (not JSON: {error.msg})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ConfigError(f'{source} is not an initmem export (no "format": "{FORMAT}" in it)')
    version = body.get("version")
    if not isinstance(version, int) or version > VERSION or version < 1:
        raise ConfigError(
            f"{source} is an export of version {version!r}, and this initmem reads versions up to {VERSION}; "
            "upgrade initmem to read it"
        )
    try:
        sweep = dict(body["sweep"])
        known = {f.name for f in dataclasses.fields(SweepExport)} - {"records"}
        records = [record_from_json(cell) for cell in body["cells"]]
        return SweepExport(records=records, **{k: v for k, v in sweep.items() if k in known})
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    except (KeyError, TypeError, ValueError, zlib.error) as error:
        raise ConfigError(f"{source} is a damaged initmem export ({type(error).__name__}: {error})") from None


# -- files ----------------------------------------------------------------------------------


def write_export(export: SweepExport, path: str | Path) -> int:
    """Write ``export`` to ``path`` (gzip JSON; the same export gives the same bytes) through a
    temporary file beside it, so a failure leaves no half-written file; returns its size in bytes."""
    path = Path(path)
    data = gzip.compress(to_json_text(export).encode(), compresslevel=9, mtime=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp's file is the owner's alone; an export is to share
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return len(data)


def read_export(path: str | Path) -> SweepExport:
    """The sweep exported to ``path`` (gzip JSON, or plain JSON). A missing file, a file that is
    no export, or one of a newer version raises one ``ConfigError`` line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; export a sweep with `initmem export NAME --out {path}`") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror or error})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as error:
            raise ConfigError(f"{path} is a damaged gzip file ({error})") from None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not an initmem export (not text)") from None
    return from_json_text(text, str(path))
