"""Standard output and error that behave like a Unix tool's when their reader goes away.

`initmem run ... | head -1` closes the pipe after one line; a write after that raises
``BrokenPipeError``, which must not end (or fail) a run that is training, nor print a traceback.
``PipeSafeStream`` drops what can no longer be read, points the descriptor at /dev/null so that
no later flush fails either, and remembers it: the command then exits with 141 (128 + SIGPIPE),
as a tool killed by the broken pipe would. A closed stream (``>&-``) is ``None`` in Python and
stays ``None``: rich and click skip it.

Output redirected to a file on a full disk (``OSError`` ENOSPC) is dropped the same way: a sweep
that trains for hours goes on (its results are in the store), and the command ends with one line
on stderr saying that its output was cut short (``unwritten_line``) and a non-zero exit code.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what the shell reports for a writer whose reader left
UNWRITTEN_EXIT = 1  # a command that would have succeeded, whose output a full disk cut short
#: A write refused for want of room: a full disk, a user's quota, a file-size limit.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class PipeSafeStream:
    """A text stream that swallows ``BrokenPipeError`` and a full disk's ``OSError`` (everything
    else is delegated)."""

    def __init__(self, stream: Any):
        self._stream = stream
        self.broken = False
        self.full: OSError | None = None  # the write a full disk refused
        self.path = ""  # the file it was written to, where one can tell

    def write(self, text: str) -> int:
        if not (self.broken or self.full):
            try:
                return self._stream.write(text)
            except OSError as error:
                self._refused(error)
        return len(text)

    def flush(self) -> None:
        if not (self.broken or self.full):
            try:
                self._stream.flush()
            except OSError as error:
                self._refused(error)

    def _refused(self, error: OSError) -> None:
        if isinstance(error, BrokenPipeError):
            self.broken = True
        elif error.errno in DISK_FULL:
            self.full, self.path = error, _path_of(self._stream)  # before the descriptor is /dev/null
        else:
            raise error
        self._write_nowhere()

    def _write_nowhere(self) -> None:
        try:  # what is still buffered, and every later write, goes nowhere instead of failing
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _path_of(stream: Any) -> str:
    """The file behind a stream's descriptor (Linux's /proc); empty where that cannot be told."""
    try:
        return os.readlink(f"/proc/self/fd/{stream.fileno()}")
    except (OSError, ValueError, AttributeError):
        return ""


def guard_standard_streams() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` (those that are open) in ``PipeSafeStream``."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, PipeSafeStream):
            setattr(sys, name, PipeSafeStream(stream))


def unwritten_line() -> str:
    """The closing line of a command whose stdout a full disk cut short; empty otherwise."""
    stream = sys.stdout
    error = getattr(stream, "full", None)
    if error is None:
        return ""
    path = getattr(stream, "path", "")
    where = f" ({path})" if path else ""
    return (
        f"Error: standard output{where} could not be written: {error.strerror or error}; the rest of "
        "this command's output was dropped; free space on that disk or send the output elsewhere"
    )


def flush_standard_streams() -> bool:
    """Flush what is open; returns whether a reader of stdout or stderr went away meanwhile."""
    broken = False
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
        broken = broken or getattr(stream, "broken", False)
    return broken
