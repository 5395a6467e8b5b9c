"""A sweep process's scratch folder in TMPDIR, which the next launch removes if the sweep was killed.

The local executor stages its workers' artifact files there, and its queue's manager listens on
a socket there. A sweep that ends in any ordinary way removes the folder; one killed outright
(SIGKILL, out of memory) cannot, so each folder holds an exclusive lock on its ``owner`` file
for as long as its sweep lives (the kernel drops it when the process dies, however it dies), and
every new scratch folder first removes the folders whose lock is free: their sweep is dead.
"""

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
