"""The ``initmem`` command: one Typer app, one module per command; plugins add more
(``plugin_commands``: ``new-plugin`` and ``clean`` are the built-in plugin ``commands``).

Importing this module must stay cheap (no torch, no mlflow): `initmem --help` and
`initmem plugins` answer in a fraction of a second.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, TypeVar

import typer

from initmem_core.plugin_system.loader import STRICT_ENV, one_line_warnings, set_registry

from .export import export_command
from .options import ENVIRONMENT_HELP, summary
from .output import BROKEN_PIPE_EXIT, UNWRITTEN_EXIT, flush_standard_streams, guard_standard_streams, unwritten_line
from .plugin_commands import WithPluginCommands
from .plugins import plugins_command
from .presets import presets_app
from .report import report_command
from .run import run_command
from .sweep import sweep_command
from .ui import ui_command
from .version import show_version

app = typer.Typer(
    name="initmem",
    cls=WithPluginCommands,
    help="Experiments on how training forgets its initialization scale sigma_w.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=ENVIRONMENT_HELP,
)


@app.callback()
def main_options(
    strict_plugins: Annotated[
        bool, typer.Option("--strict-plugins", help=f"Fail on any plugin that does not load (also ${STRICT_ENV}=1)")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=show_version,
            is_eager=True,
            help="Print the versions of initmem, torch, mlflow, timm and pluggy, and the device a run would use",
        ),
    ] = False,
) -> None:
    one_line_warnings()
    if strict_plugins:
        os.environ[STRICT_ENV] = "1"
        set_registry(None)  # reload under the strict rule


for name, command in (
    ("run", run_command),
    ("plugins", plugins_command),
    ("sweep", sweep_command),
    ("report", report_command),
    ("export", export_command),
    ("ui", ui_command),
):
    # The summary `initmem --help` lists: the docstring's first paragraph as one sentence.
    app.command(name, short_help=summary(command.__doc__), epilog=ENVIRONMENT_HELP)(command)
app.add_typer(presets_app, name="presets", short_help=summary(presets_app.info.help))


def main() -> None:
    """The ``initmem`` command."""
    guard_standard_streams()
    try:
        app()
    except SystemExit as done:
        if "torch" in sys.modules:
            exit_without_teardown(done)
        raise SystemExit(exit_code_after_flushing(done.code)) from None
    raise SystemExit(exit_code_after_flushing(0))


#: An exit code as ``SystemExit`` holds it: a number, a message (exit 1) or None (exit 0).
ExitCode = TypeVar("ExitCode", bound=int | str | None)


def exit_code_after_flushing(code: ExitCode) -> ExitCode | int:
    """``code``, or 141 if the command would have succeeded but the reader of its output left, or
    1 with one line on stderr if a full disk cut its output short."""
    broken = flush_standard_streams()
    line = unwritten_line()
    if line:
        if sys.stderr is not None:  # on the full disk too, it drops the line: the exit code remains
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        return code or UNWRITTEN_EXIT
    return BROKEN_PIPE_EXIT if broken and not code else code


def exit_without_teardown(done: SystemExit) -> None:
    """End a process that trained. Freeing torch's and the run's objects one by one at interpreter
    exit takes about a second here and serves nothing: flush the output, run the exit handlers
    and leave. (Only when no other thread is still working; otherwise Python's own exit.)"""
    import atexit
    import threading

    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        raise SystemExit(exit_code_after_flushing(done.code)) from None
    code = done.code
    if isinstance(code, str):
        if sys.stderr is not None:
            print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    code = exit_code_after_flushing(code)
    os._exit(code or 0)
