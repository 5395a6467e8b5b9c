"""``--json``: a command's answer for scripts, as exactly one JSON document on standard output.

While such a command works, everything else it prints (rich tables, progress, a library's stray
``print``) goes to standard error, so a script reads stdout whole with ``json.loads`` and a person
still sees the progress. A command that fails with an error prints its one line on stderr as usual
and exits non-zero; stdout then carries a document only when there is a result to describe (a run
that diverged has a run id and a status).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from .tables import output_console

JSON_HELP = "Print one JSON document on stdout for scripts; everything else goes to stderr"


class ScriptOutput:
    """Where a command's output goes: ``console`` for people (stderr under ``--json``) and
    ``emit`` for the one JSON document (only under ``--json``)."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.console = output_console(stderr=as_json)  # no word broken when piped to a log
        self._stdout: Any = None
        self._emitted = False

    @contextlib.contextmanager
    def redirected(self) -> Iterator[ScriptOutput]:
        """Under ``--json``, stdout is stderr while the command works; ``emit`` writes to the real one."""
        if not self.as_json:
            yield self
            return
        self._stdout = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            yield self

    def echo(self, text: str) -> None:
        """A line for people: stdout, or stderr under ``--json``."""
        print(text, file=sys.stderr if self.as_json else sys.stdout)

    def emit(self, document: Any) -> None:
        """The JSON document, once; nothing without ``--json``."""
        if not self.as_json or self._emitted:
            return
        self._emitted = True
        stream = self._stdout if self._stdout is not None else sys.stdout
        stream.write(json.dumps(document, indent=2, default=str, allow_nan=False) + "\n")
        stream.flush()


def finite(value: Any) -> Any:
    """A number JSON can hold: NaN and infinities (a never-interpolated figure) become ``None``."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value
