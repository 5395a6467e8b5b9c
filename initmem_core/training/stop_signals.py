"""SIGTERM, SIGHUP and Ctrl-C during training: finish the step, write a checkpoint, then stop.

The handler only records the signal; the training loop looks at ``requested`` after every step
(no I/O, no lock, nothing half-done inside a signal handler). A second signal while the first
is being handled stops at once, for a run stuck in a write.

The handler stays until the run is ended in the store: once ``finishing`` is set (the run is
trained, or is being stopped), any signal is only recorded, so neither a second signal nor one
that arrives while the summary and artifacts are written can cut the store's last writes short
and leave the run RUNNING.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from initmem_core.vocabulary import KILLED

#: A hang-up (the terminal closed) ends a run as SIGTERM does: checkpointed and marked KILLED.
HANDLED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


#: ``Stopped.status`` of a run stopped before its tracked run was opened: nothing was written.
NOT_TRACKED = "not tracked"


class Stopped(KeyboardInterrupt):
    """Training stopped on a signal; ``checkpoint`` is the file it saved first (``None`` when the
    run keeps none, or a second signal cut the save short). A ``KeyboardInterrupt``, so code that
    treats Ctrl-C as "mark the run KILLED and stop" treats SIGTERM the same way."""

    def __init__(self, signum: int, checkpoint: str | None = None, status: str = KILLED):
        super().__init__(signum, checkpoint)
        self.signum, self.checkpoint = signum, checkpoint
        self.status = status  # how the run ended: KILLED, or FINISHED when it came during finalization
        self.unsynced = ""  # writes the store has not taken yet, and how to upload them

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    def __str__(self) -> str:
        return f"stopped by {self.signal_name}"


class StopSignals:
    """While active (``with StopSignals() as stop``), SIGINT, SIGTERM and SIGHUP set ``stop.signum``;
    never entered, it is never requested (the training loop's default).

    Outside the main thread signals cannot be handled, so there it does nothing. ``runs_ended``
    counts, per process, the runs whose handlers are gone again: a command's own handler, back
    in place then, knows that a signal no longer comes before the run.
    """

    runs_ended = 0

    def __init__(self) -> None:
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}
        self.finishing = False  # the run is being ended in the store: record signals, never interrupt

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.finishing:
            self.signum = self.signum or signum
            return
        if self.signum is not None:
            raise Stopped(signum)
        self.signum = signum

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.previous = {signum: signal.signal(signum, self._handle) for signum in HANDLED}
        return self

    def __exit__(self, *exc: Any) -> None:
        StopSignals.runs_ended += 1
        for signum, handler in self.previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
