"""Which dataset the files in ``--data-dir`` are: a dataset may declare its files' md5 checksums
(``contracts.DatasetInfo.files``); a folder holding another dataset's files and none of the wanted
one's is refused before anything is built or tracked. A file matching no declared checksum (a
stand-in, a subset) is read as it is. A ``.gz`` file matches by its own checksum or its content's.
Each file is hashed once per process (path, size, mtime)."""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Mapping
from pathlib import Path

from initmem_core.errors import ConfigError
from initmem_core.plugin_system.registry import ComponentSpec

_DIGESTS: dict[tuple[str, int, int, bool], str] = {}


def _md5(path: Path, unpacked: bool) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, unpacked)
    if key not in _DIGESTS:
        digest = hashlib.md5(usedforsecurity=False)
        with gzip.open(path, "rb") if unpacked else open(path, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def check_data_dir(wanted: str, folder: str, datasets: Mapping[str, ComponentSpec]) -> None:
    """``ConfigError`` in one line when ``folder`` (and its folders, three levels deep: torchvision's
    ``<Class>/raw/``) holds files another dataset declares and none that ``wanted`` declares."""
    owners: dict[tuple[str, str], list[str]] = {}  # (file name, md5) -> the datasets declaring it
    for name, spec in sorted(datasets.items()):
        for file, md5 in spec.info.files:
            owners.setdefault((file, md5.lower()), []).append(name)
    names = {file for file, _ in owners}
    root = Path(folder).expanduser()
    found = (*root.glob("*"), *root.glob("*/*"), *root.glob("*/*/*")) if names and root.is_dir() else ()
    candidates = [p for p in found if p.is_file() and (p.name in names or p.name.removesuffix(".gz") in names)]
    foreign: tuple[Path, str] | None = None
    for path in sorted(candidates, key=lambda p: p.stat().st_size):  # the small files first
        forms = [(path.name, False)] + ([(path.name[:-3], True)] if path.name.endswith(".gz") else [])
        try:
            known = [
                o for name, unpacked in forms if name in names for o in owners.get((name, _md5(path, unpacked)), [])
            ]
        except (OSError, EOFError, gzip.BadGzipFile):
            continue  # unreadable here: the loader says what is wrong with it
        if wanted in known:
            return
        foreign = foreign or ((path, known[0]) if known else None)
    if foreign:
        path, other = foreign
        raise ConfigError(
            f"--data {wanted}: {root} holds {other}'s files ({path.relative_to(root)} matches {other}'s checksum), "
            f"not {wanted}'s; pass --data {other} or point --data-dir at {wanted}'s files"
        )
