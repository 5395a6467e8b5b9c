"""``initmem run``: train one model and track it in MLflow."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

import initmem_core
from initmem_core import Diverged, Stopped
from initmem_core.config import EXEC, from_mapping, load_toml
from initmem_core.training.stop_signals import NOT_TRACKED
from initmem_core.vocabulary import (
    BEST_VAL_EPOCH,
    BEST_VAL_TEST_ACC,
    CLOCKS,
    CONFIG_HASH_TAG,
    FAILED,
    FINAL_TEST_ACC,
    KILLED,
    REPAIR_GAP,
    STOP_EPOCH,
    STOP_REASON_TAG,
    TAU_INTERP,
    WEIGHT_NORMS,
)

from .errors import fail, user_errors
from .options import DEFAULT_EXPERIMENT, TRACKING, Experiment, TrackingUri, with_config_options
from .script_output import JSON_HELP, ScriptOutput, finite

SUMMARY_KEYS = (BEST_VAL_TEST_ACC, BEST_VAL_EPOCH, FINAL_TEST_ACC, TAU_INTERP, REPAIR_GAP)
FINAL_KEYS = (*WEIGHT_NORMS, *CLOCKS)


class ProgressMode(StrEnum):
    """``--progress`` (``cli.progress.PROGRESS_MODES``)."""

    auto = "auto"
    lines = "lines"
    bar = "bar"


def resolve_config(config_file: Path | None, config_values: dict[str, Any]):
    """TOML file first, then the options given on the command line."""
    values = load_toml(config_file) if config_file else {}
    source = str(config_file) if config_file else "the options"
    from_mapping(values, source)  # a bad key names the file
    return from_mapping({**values, **config_values}, source)  # --until without --epochs: no cap


def summary_table(result, name: str) -> Table:
    table = Table(title=f"{name}  ({result.status})")
    table.add_column("figure", overflow="fold")  # fold, never cut, on a narrow terminal
    table.add_column("value", justify="right", overflow="fold")
    final = result.history[-1] if result.history else {}
    for key in SUMMARY_KEYS:
        value = result.summary.get(key)
        table.add_row(key, "never interpolated" if value is None else f"{value:.4g}")
    for key in FINAL_KEYS:
        if key in final:
            table.add_row(f"final {key}", f"{final[key]:.4g}")
    if STOP_EPOCH in result.summary:  # where and why it ended: --patience may end it before --epochs
        table.add_row("stopped", f"epoch {result.summary[STOP_EPOCH]:g} ({result.stop_reason})")
    return table


@with_config_options()
@user_errors
def run_command(
    config_values: dict[str, Any],
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="TOML file of run options; options given here override it", rich_help_panel="Configuration"
        ),
    ] = None,
    experiment: Experiment = DEFAULT_EXPERIMENT,
    tracking_uri: TrackingUri = None,
    no_tracking: Annotated[
        bool, typer.Option("--no-tracking", help="Run without writing to MLflow", rich_help_panel=TRACKING)
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue this config's killed run from its last checkpoint, in the same MLflow run",
            rich_help_panel=EXEC,
        ),
    ] = False,
    system_metrics: Annotated[
        bool,
        typer.Option(
            "--system-metrics",
            help=(
                "Record MLflow's system metrics on the run (CPU, memory, disk, network; GPUs with the "
                "gpu-metrics extra), sampled every 5 s by the tracking helper"
            ),
            rich_help_panel=TRACKING,
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP, rich_help_panel=TRACKING)] = False,
    progress: Annotated[
        ProgressMode,
        typer.Option(
            "--progress",
            help=(
                "auto: a progress bar, and one line per epoch (loss, train/val/test accuracy, clocks) when "
                "stderr is a terminal; lines: the epoch lines wherever stderr goes (a log); bar: the bar only"
            ),
            rich_help_panel=TRACKING,
        ),
    ] = ProgressMode.auto,
) -> None:
    """Train one model, e.g. `initmem run --arch resnet56 --opt muon --sigma 2.0`."""
    run_config = resolve_config(config, config_values)
    output = ScriptOutput(as_json)
    with output.redirected():
        _run_and_report(
            run_config, output, no_tracking, tracking_uri, experiment, resume, system_metrics, progress.value
        )


def _run_and_report(
    run_config,
    output: ScriptOutput,
    no_tracking,
    tracking_uri,
    experiment,
    resume,
    system_metrics,
    progress_mode: str = "auto",
):
    from initmem_core.training.checkpoint_store import (  # lazy: keeps the checkpoint code out of the CLI's start-up
        CheckpointNotWritten,
    )

    from .progress import RunProgress  # lazy: keeps rich.progress out of the CLI's start-up

    console = output.console
    try:
        with RunProgress(console, label=run_config.run_name(), mode=progress_mode) as progress:
            result = initmem_core.run(
                run_config,
                tracking=not no_tracking,
                tracking_uri=tracking_uri,
                experiment=experiment,
                progress=progress,
                resume=resume,
                system_metrics=system_metrics,
            )
    except (Diverged, CheckpointNotWritten, Stopped) as error:
        _emit_ended_early(output, run_config, error)
        _fail_for(run_config, error)
        raise  # not reached: _fail_for raises
    except KeyboardInterrupt:  # only before the run exists: from then on signals become Stopped
        raise fail("interrupted before the run was tracked; nothing was written", 130) from None
    console.print(summary_table(result, run_config.run_name()))
    if result.unsynced and not result.lost:
        console.print(f"[yellow]{stored_as(result.status, result)}[/yellow]")
    if result.run_id and not no_tracking:
        console.print(f"MLflow run id: [bold]{result.run_id}[/bold]  (browse with `initmem ui`)")
    output.emit(run_document(result, run_config.run_name(), tracked=not no_tracking))
    if result.lost:  # the last line: what is missing, and the command that records it
        raise fail(
            f"{run_config.run_name()} ended {result.status}, but {result.unsynced}; {recovery(result.checkpoint)}", 1
        )


def run_document(result, name: str, tracked: bool = True) -> dict[str, Any]:
    """What ``initmem run --json`` prints: the run's id, status, summary and last epoch's figures."""
    final = result.history[-1] if result.history else {}
    return {
        "run_id": result.run_id if tracked else None,
        "run_name": name,
        "status": result.status,
        CONFIG_HASH_TAG: result.config_hash,
        "summary": {key: finite(value) for key, value in result.summary.items()},
        STOP_REASON_TAG: result.stop_reason or None,
        "final": {key: finite(final[key]) for key in FINAL_KEYS if key in final},
        "unsynced": result.unsynced or None,
        "checkpoint": result.checkpoint,
    }


def _emit_ended_early(output: ScriptOutput, run_config, error: BaseException) -> None:
    """Under ``--json``, a run that exists but ended early (diverged, stopped, a checkpoint not
    written) is still described: its id and how it ended; the error's line follows on stderr."""
    run_id = getattr(error, "run_id", None)
    status = getattr(error, "status", None) or FAILED
    if run_id is None or status == NOT_TRACKED:
        return
    output.emit(
        {
            "run_id": run_id,
            "run_name": run_config.run_name(),
            "status": status,
            CONFIG_HASH_TAG: error.config_hash,  # type: ignore[attr-defined]  # the run's: its lr resolved
            "summary": {},
            "error": str(error),
            "unsynced": getattr(error, "unsynced", "") or None,
        }
    )


def _fail_for(run_config, error: BaseException):
    from initmem_core.training.checkpoint_store import (  # lazy: keeps the checkpoint code out of the CLI's start-up
        CheckpointNotWritten,
    )

    if isinstance(error, Diverged):
        raise fail(f"{run_config.run_name()} {error}; {stored_as('FAILED with tag diverged=true', error)}", 1) from None
    if isinstance(error, CheckpointNotWritten):
        raise fail(
            f"{run_config.run_name()}: {error}; {stored_as(FAILED, error)}; {error.how_to_continue()}", 1
        ) from None
    if isinstance(error, Stopped):
        if error.status == NOT_TRACKED:
            raise fail(f"{error} before the run was tracked; nothing was written", error.exit_code) from None
        resume_hint = (
            f"; checkpoint {error.checkpoint}: run the same command with --resume to continue"
            if error.checkpoint and error.status == KILLED
            else ""
        )
        raise fail(f"{error}; {stored_as(error.status, error)}{resume_hint}", error.exit_code) from None


def recovery(checkpoint: str | None) -> str:
    """How a run's figures that neither the store nor the unsynced folder took get recorded."""
    if checkpoint is None:
        return "this run kept no checkpoint (--checkpoint-every 0), so they are lost"
    return (
        f"checkpoint {checkpoint} holds every epoch's figures: once the store answers, {resume_command()} records them"
    )


def resume_command() -> str:
    """This very command with --resume, as the user can paste it."""
    import shlex
    import sys

    if Path(sys.argv[0]).name not in ("initmem", "__main__.py"):  # called from Python, not a shell
        return "the same command with --resume"
    arguments = [*sys.argv[1:], *([] if "--resume" in sys.argv else ["--resume"])]
    return f"`initmem {shlex.join(arguments)}`"


def stored_as(status: str, outcome: Any) -> str:
    """What the store holds of the run: its end, or, while writes wait, still RUNNING."""
    unsynced = getattr(outcome, "unsynced", "")
    if unsynced:
        return f"the run ended {status}, but the store still shows it RUNNING: {unsynced}"
    return f"the run is marked {status}"
