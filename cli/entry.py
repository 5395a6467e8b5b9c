"""The ``initmem`` executable: signals are handled from its first moment on.

A Ctrl-C, SIGTERM or SIGHUP that reaches ``initmem run`` before its run exists (while Python,
torch and the data load) ends the command at once: one line, exit code 128 + the signal, the
tracking helper killed and waited for, so nothing is created after the command has exited. (Left
to Python, a Ctrl-C in the middle of an import leaves half-imported modules behind, which fail
seconds later with a traceback, and SIGTERM ends the command silently while its helper goes on.)
Once the run exists, the run's own handlers (``training.stop_signals``) checkpoint and end it;
after it has ended, a signal again ends the command at once. ``initmem sweep`` has the same early
handlers until it is about to start (``early_signals.handled_from_here``), where its own Ctrl-C handling
takes over. The handlers are ``early_signals``'s.

Only the standard library is imported here, before anything else: this module is what runs first.
"""

from __future__ import annotations

import sys

from .early_signals import install


def main() -> None:
    """The ``initmem`` command."""
    command = _command(sys.argv[1:])
    if command in ("run", "sweep"):  # a sweep hands signals back before it starts (early_signals.handled_from_here)
        install(command)
    from .app import main as app_main  # lazy: only the standard library loads before the signal handlers are set

    app_main()


def _command(arguments: list[str]) -> str | None:
    """The command's name: the first argument that is not an option of ``initmem`` itself."""
    return next((argument for argument in arguments if not argument.startswith("-")), None)
