"""Standard output and error that behave like a Unix tool's when their reader goes away.

`initmem run ... | head -1` closes the pipe after one line; a write after that raises
``BrokenPipeError``, which must not end (or fail) a run that is training, nor print a traceback.
``PipeSafeStream`` drops what can no longer be read, points the descriptor at /dev/null so that
no later flush fails either, and remembers it: the command then exits with 141 (128 + SIGPIPE),
as a tool killed by the broken pipe would. A closed stream (``>&-``) is ``None`` in Python and
stays ``None``: rich and click skip it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what the shell reports for a writer whose reader left


class PipeSafeStream:
    """A text stream that swallows ``BrokenPipeError`` (everything else is delegated)."""

    def __init__(self, stream: Any):
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        self.broken = True
        try:  # what is still buffered, and every later write, goes nowhere instead of failing
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_standard_streams() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` (those that are open) in ``PipeSafeStream``."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, PipeSafeStream):
            setattr(sys, name, PipeSafeStream(stream))


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
