"""The ``initmem`` executable: signals are handled from its first moment on.

A Ctrl-C, SIGTERM or SIGHUP that reaches ``initmem run`` before its run exists (while Python,
torch and the data load) ends the command at once: one line, exit code 128 + the signal, the
tracking helper killed and waited for, so nothing is created after the command has exited. (Left
to Python, a Ctrl-C in the middle of an import leaves half-imported modules behind, which fail
seconds later with a traceback, and SIGTERM ends the command silently while its helper goes on.)
Once the run exists, the run's own handlers (``training.stop_signals``) checkpoint and end it;
after it has ended, a signal again ends the command at once. ``initmem sweep`` has the same early
handlers until it is about to start (``handled_from_here``), where its own Ctrl-C handling takes over.

Only the standard library is imported here, before anything else: this module is what runs first.
"""

from __future__ import annotations

import os
import signal
import sys

ENDED = 128  # exit code: 128 + the signal's number, as the shell reports a process it ended
EARLY = ("SIGINT", "SIGTERM", "SIGHUP")
_exiting = False
_command_name = "run"  # what the line says was not tracked


def main() -> None:
    """The ``initmem`` command."""
    global _command_name
    command = _command(sys.argv[1:])
    if command in ("run", "sweep"):  # a sweep hands signals back before it starts (handled_from_here)
        _command_name = command
        for name in EARLY:
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), _exit_at_once)
    from .app import main as app_main  # lazy: only the standard library loads before the signal handlers are set

    app_main()


def handled_from_here() -> None:
    """From here on the command handles signals itself (``initmem sweep``: Ctrl-C stops its cells
    and marks them KILLED): Python's own handlers again, where ``main`` set the early ones."""
    for name in EARLY:
        if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) is _exit_at_once:
            signal.signal(getattr(signal, name), signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL)


def _command(arguments: list[str]) -> str | None:
    """The command's name: the first argument that is not an option of ``initmem`` itself."""
    return next((argument for argument in arguments if not argument.startswith("-")), None)


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
