"""A sweep process's scratch folder in TMPDIR (the local executor's staged artifacts and queue
socket). A sweep killed outright cannot remove it, so each folder's ``owner`` file stays locked
while its sweep lives (the kernel drops the lock when the process dies), and each new scratch
folder first removes those whose lock is free."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "initmem-sweep-"
OWNER = "owner"
SOCKET = "queue.sock"
#: AF_UNIX socket paths are limited to 107 bytes (Linux); a longer TMPDIR leaves the socket to multiprocessing.
SOCKET_PATH_MAX = 100


def remove_abandoned(folder: str | Path | None = None) -> list[Path]:
    """Remove the scratch folders in ``folder`` (default: TMPDIR) whose sweep is dead; returns them.
    A folder without an owner file is one being made this moment, and is left alone."""
    removed = []
    for path in Path(folder or tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            with open(path / OWNER, "rb") as owner:
                fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken: nobody holds it
        except OSError:  # held by a live sweep, not ours to read, or no owner file yet
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


class ScratchFolder:
    """A new scratch folder (``name``), locked by this process until ``cleanup()``."""

    def __init__(self) -> None:
        remove_abandoned()
        # Made under a name remove_abandoned passes over, locked, then renamed into view: another
        # launch never sees it without its lock.
        making = Path(tempfile.mkdtemp(prefix=f".{PREFIX}"))
        self._owner = open(making / OWNER, "wb")
        fcntl.flock(self._owner, fcntl.LOCK_EX)
        self.name = str(making.with_name(making.name[1:]))
        os.rename(making, self.name)

    @property
    def socket(self) -> str | None:
        """Where the queue's manager may listen (``None``: too long a path; multiprocessing picks one)."""
        path = os.path.join(self.name, SOCKET)
        return path if len(path) <= SOCKET_PATH_MAX else None

    def cleanup(self) -> None:
        shutil.rmtree(self.name, ignore_errors=True)
        self._owner.close()
