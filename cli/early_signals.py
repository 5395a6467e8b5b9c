"""The early signal handlers of ``initmem run`` and ``initmem sweep`` (``cli/entry.py`` sets them
before anything else is imported): a signal ends the command at once, with one line and exit code
128 + the signal, the tracking helper killed and waited for. ``handled_from_here`` hands signals back
to Python where a command starts handling them itself (``initmem sweep``, before its cells start).

Only the standard library is imported here: this module runs before anything else is loaded.
"""

from __future__ import annotations

import os
import signal
import sys

ENDED = 128  # exit code: 128 + the signal's number, as the shell reports a process it ended
EARLY = ("SIGINT", "SIGTERM", "SIGHUP")
_exiting = False
_command_name = "run"  # what the line says was not tracked


def install(command: str) -> None:
    """From now until the command takes over, ``EARLY``'s signals end ``command`` at once."""
    global _command_name
    _command_name = command
    for name in EARLY:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _exit_at_once)


def handled_from_here() -> None:
    """From here on the command handles signals itself (``initmem sweep``: Ctrl-C stops its cells
    and marks them KILLED): Python's own handlers again, where ``install`` set the early ones."""
    for name in EARLY:
        if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) is _exit_at_once:
            signal.signal(getattr(signal, name), signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL)


def _exit_at_once(signum: int, frame: object) -> None:
    global _exiting
    if _exiting:  # a second signal while the first is being handled: the first one's line stands
        return
    _exiting = True
    name = signal.Signals(signum).name
    stop_signals = sys.modules.get("initmem_core.training.stop_signals")
    if stop_signals is not None and stop_signals.StopSignals.runs_ended:
        line = f"Error: stopped by {name} after the run ended\n"
    else:
        line = f"Error: stopped by {name} before the {_command_name} was tracked; nothing was written\n"
    tracker_process = sys.modules.get("initmem_core.tracking.tracker_process")
    if tracker_process is not None:
        tracker_process.end_helpers_without_a_run()
    for stream in (sys.stdout, sys.stderr):
        try:  # what was printed before; the buffer may be in use by the code interrupted
            stream.flush()
        except Exception:
            pass
    try:  # straight to the descriptor: the stream's own lock may be held by the interrupted code
        os.write(2, line.encode())
    except OSError:
        pass
    os._exit(ENDED + signum)
