"""Who holds a lock: another process's lock on a file, named from Linux's /proc/locks, so that a
wait on it can say whom it waits for."""

from __future__ import annotations

import os
from pathlib import Path

LOCK_PATIENCE_S = 1.0  # how long a held store lock is waited for before the wait is said


def lock_holder(path: Path, kinds: tuple[str, ...] = ("FLOCK",)) -> str:
    """``process N (its command line)``, another process holding a lock of one of ``kinds`` on
    ``path``, from Linux's /proc/locks; empty if not known."""
    try:
        inode = path.stat().st_ino
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if (
                len(fields) > 5
                and fields[1] in kinds
                and fields[5].rsplit(":", 1)[-1] == str(inode)
                and fields[4] not in ("-1", str(os.getpid()))
            ):
                pid = int(fields[4])
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                return f"process {pid} ({command.strip()[:80]})"
    except (OSError, ValueError):
        pass
    return ""
