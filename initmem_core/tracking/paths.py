"""Names that become paths, and folders that must take a write: a name from a command line (an
experiment, a sweep) cannot lead out of its folder, and a folder that cannot be written fails
before any training rather than after every run."""

from __future__ import annotations

import errno
import re
import tempfile
from pathlib import Path

from initmem_core.errors import ConfigError

_UNSAFE = re.compile(r"[^\w.,=+@-]")


def safe_file_name(name: str) -> str:
    """``name`` as one file name that cannot leave its folder: separators and anything unusual
    become ``_``, leading dots go (no ``..``, no hidden files), at most 200 characters."""
    return _UNSAFE.sub("_", name).lstrip(".")[:200] or "_"


def path_under(root: str | Path, name: str) -> Path:
    """``root/<safe_file_name(name)>``, checked to stay under ``root`` whatever links say."""
    root = Path(root)
    path = root / safe_file_name(name)
    if not path.resolve().is_relative_to(root.resolve()):
        raise ConfigError(f"{name!r} leads out of {root}; choose another name")
    return path


def write_refused(folder: Path) -> OSError | None:
    """Why ``folder`` refuses a file (it is missing, read-only, full...), or ``None`` if it takes
    one. A real write, at once removed: permission bits say nothing for root or on a read-only mount."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return error
    return None


def check_writable_folder(folder: str | Path, flag: str) -> Path:
    """A folder that exists or can be created, and can be written: checked (without creating
    anything) before any training, so a bad path fails at once rather than after every run."""
    folder = Path(folder).expanduser()
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{flag} {folder}: {existing} is not a folder")
    error = write_refused(existing)
    if error is not None:
        reason = error.strerror or errno.errorcode.get(error.errno or 0, type(error).__name__)
        raise ConfigError(f"{flag} {folder} cannot be written ({reason} in {existing}); choose a writable folder")
    return folder
