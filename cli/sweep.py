"""``initmem sweep``: a grid of runs under one MLflow parent run, then the initialization-memory report."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from initmem_core.plugin_system.loader import get_registry
from initmem_core.sweep.executor import make_executor
from initmem_core.tracking.uris import resolve_tracking_uri
from initmem_core.vocabulary import CLOCK_SYMBOLS, CLOCKS, CONFIG_HASH_TAG, FINISHED

from .early_signals import handled_from_here
from .errors import fail, user_errors
from .options import DEFAULT_EXPERIMENT, Experiment, TrackingUri, with_config_options
from .script_output import JSON_HELP, ScriptOutput, finite
from .sweep_file import with_file_options
from .tables import one_table

SWEEP, EXECUTOR = "Sweep", "Executor"
#: Each executor option's flag, by the name its factory takes it under (which executors take it,
#: each declares: ``contracts.ExecutorInfo.options``).
EXECUTOR_FLAGS = {
    "workers": "--workers",
    "lockstep": "--lockstep",
    "lockstep_max": "--lockstep-max",
    "address": "--ray-address",
    "max_retries": "--max-retries",
    "cpus_per_cell": "--cpus-per-cell",
    "gpus_per_cell": "--gpus-per-cell",
    "partition": "--slurm-partition",
    "time_min": "--slurm-time",
    "options": "--slurm-option",
    "local": "--slurm-local",
}


def build_executor(name: str, out: Path, given: dict[str, Any], registry=None):
    """The executor, from the executor options the user gave (``None``: not given), each under
    the name its factory takes it by (``EXECUTOR_FLAGS``)."""
    options = {key: value for key, value in given.items() if value not in (None, False, [])}
    return make_executor(name, folder=out / name, registry=registry, flags=EXECUTOR_FLAGS, **options)


#: The dry run's columns of the clocks each cell ends with, after its "epochs run".
CLOCK_COLUMNS = {CLOCK_SYMBOLS[clock]: clock for clock in CLOCKS}


def dry_run_tables(plan, horizons=None, states=None) -> list[Table]:
    """The groups (numbered, with what sets each apart, folded: never cut), then each cell by
    group number, sigma and seed, with (``horizons``: from
    ``initmem_core.training.plan.plan_horizons``) the epochs it trains and the clocks it
    ends with (``≤`` the cap when ``--patience`` may stop it earlier); ``?`` where the data cannot
    be read here; ``states``: each cell's in the store (``dry_run.read_store``). Narrow enough for 80
    columns."""
    numbers = {key: number for number, key in enumerate(dict.fromkeys(plan.groups), start=1)}
    legend = Table(title="dry run: nothing is run; the groups")
    legend.add_column("group", justify="right", no_wrap=True)
    legend.add_column("cells", justify="right", no_wrap=True)
    legend.add_column("settings", overflow="fold")
    for key, number in numbers.items():
        legend.add_row(str(number), str(plan.groups.count(key)), key)
    table = Table(title="the cells")
    for header in ["#", "group", "sigma", "seed", *(["epochs run", *CLOCK_COLUMNS] if horizons else [])]:
        table.add_column(header, justify="right", no_wrap=True)
    if states:
        table.add_column("store", no_wrap=True)
    for index, (cell, key) in enumerate(zip(plan.cells, plan.groups)):
        trained = []
        if horizons:
            horizon = horizons[index]
            trained = (
                [f"≤{horizon.epochs}" if cell.patience else str(horizon.epochs)]  # --patience: the cap
                + [f"{horizon.clocks[c]:.4g}" for c in CLOCK_COLUMNS.values()]
                if horizon
                else ["?"] * (1 + len(CLOCK_COLUMNS))
            )
        state = [states[index]] if states else []
        table.add_row(str(index + 1), str(numbers[key]), f"{cell.sigma:g}", str(cell.seed), *trained, *state)
    return [legend, table]


def forecasts_of(plan, horizons) -> list:
    """Each planned group's mechanism clock against the threshold its claims need (report/regime.py)."""
    from .dry_run import clock_forecasts  # lazy: keeps the report code out of the CLI's start-up

    ends: list[dict[str, float] | None] = (
        [horizon.clocks if horizon else None for horizon in horizons] if horizons else [None] * len(plan.cells)
    )
    return clock_forecasts(plan.groups, plan.plans, ends)


def regime_table(plan, forecasts, testable: dict[str, list[str]], needs: dict[str, Any]) -> Table:
    """The dry run's forecast: each group's mechanism clock at the end against its threshold, and
    which groups will not reach it (their claims can then not be contradicted: horizon short),
    with what they would need (``needs``, by group: ``dry_run.needed``). Only the clocks of
    claims the sweep can test (``testable``: ``dry_run.forecast_claims``), and only those claims."""
    claims = {clock: ", ".join(names) for clock, names in testable.items()}

    numbers = {key: number for number, key in enumerate(dict.fromkeys(plan.groups), start=1)}
    table = Table(title="the regime: each group's forgetting clock at the end, against the threshold its claims need")
    for header in ("group", "clock", "reaches", "threshold", "forecast"):
        table.add_column(header, justify="right" if header != "forecast" else "left", overflow="fold")
    for f in (f for f in forecasts if f.clock in claims):
        verdict = "?" if f.reached != f.reached else ("short: " if f.short else "reaches it: ") + claims[f.clock]
        if f.short and needs.get(f.group) is not None:
            verdict += f"; {needs[f.group].text()}"
        table.add_row(str(numbers[f.group]), CLOCK_SYMBOLS[f.clock], f"{f.reached:.3g}", f"{f.threshold:g}", verdict)
    return table


def duration(seconds: float) -> str:
    """``3725`` -> ``"1 h 2 min"``; under a minute in seconds."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def cost_lines(cost) -> list[str]:
    """What ``initmem_core.sweep.cost.estimate_cost`` found, as the dry run prints it."""
    if cost.cpu_seconds is None:
        return [f"estimated time: unknown here ({'; '.join(cost.unknown)})"]
    steps = ", ".join(
        f"{t.arch} {t.seconds * 1e3:.0f} ms/step at batch {t.batch_size}"
        + (f" (scaled from {t.measured_batch})" if t.measured_batch != t.batch_size else "")
        for t in cost.step_times
    )
    evaluation = (
        f"; evaluation {duration(cost.eval_seconds)} of it, {cost.evaluated_examples:,} examples scored"
        if cost.eval_seconds is not None and cost.evaluated_examples is not None
        else ""
    )
    lines = [
        f"estimated time here: {duration(cost.cpu_seconds)} with {cost.workers} worker(s), training and "
        f"evaluation ({steps}; measured on 1 thread{evaluation}; start-up not counted)"
    ]
    if cost.unknown:
        lines.append(f"  not counted: {'; '.join(cost.unknown)}")
    if cost.gpu_seconds is not None:
        lines.append(
            f"estimated on a GPU: {duration(cost.gpu_seconds)} of training steps, one cell at a time "
            f"({cost.gpu_source})"
        )
    else:
        lines.append(f"estimated on a GPU: none ({cost.gpu_source})")
    return lines


def adaptive_lines(cells) -> list[str]:
    """What the dry run says of cells whose horizon is adaptive (``--patience``): it shows their cap."""
    adaptive = [cell for cell in cells if cell.patience]
    if not adaptive:
        return []
    caps = sorted({cell.epochs for cell in adaptive})
    return [
        f"adaptive horizon: {len(adaptive)} of {len(cells)} cells stop early once their best validation loss "
        f"has not improved for --patience evaluations, at most {', '.join(map(str, caps))} epochs (--epochs, "
        f"the cap{'; with --until, not before its target' if any(cell.until for cell in adaptive) else ''}); "
        "their epochs, clocks, regime and time above are for the cap: an upper bound"
    ]


def dry_run_document(plan, horizons, cost, disk, work, forecasts=(), store=None, testable=None, needs=None):
    """What ``--dry-run --json`` prints: every cell (its run name, group, sigma, seed, its state in
    the store and, where known, the epochs it trains and the clocks it ends with), the cells by
    state, each group's forecast against the regime (only the clocks of claims the sweep can
    test, with what a short group needs), the estimated time of the cells to run and their disk.
    ``work``: ``dry_run.work_of``'s; ``cost``: ``None`` when no cell is to run."""
    testable, needs = testable or {}, needs or {}
    cells = []
    for index, (cell, group) in enumerate(zip(plan.cells, plan.groups)):
        horizon = horizons[index] if horizons else None
        cells.append(
            {
                "name": plan.names[index] if plan.names else cell.run_name(),
                "group": group,
                "sigma": cell.sigma,
                "seed": cell.seed,
                CONFIG_HASH_TAG: plan.plans[index].config_hash,
                "epochs": horizon.epochs if horizon else None,  # --patience: the cap
                "adaptive": bool(cell.patience),
                "clocks": {clock: finite(value) for clock, value in horizon.clocks.items()} if horizon else None,
                "store": store.states[index] if store else None,
            }
        )
    return {
        "sweep": plan.name,
        "out": str(plan.out),
        "cells": cells,
        "groups": list(dict.fromkeys(plan.groups)),
        "store": {**store.counts, "note": store.note} if store else None,
        "regime": [
            {
                "group": f.group,
                "clock": f.clock,
                "reaches": finite(f.reached),
                "threshold": f.threshold,
                "short": f.short,
                "claims": testable[f.clock],
                "epochs_needed": getattr(needs.get(f.group), "epochs", None) if f.short else None,
                "until_needed": getattr(needs.get(f.group), "until", None) if f.short else None,
            }
            for f in forecasts
            if f.clock in testable
        ],
        "work": work,
        "estimate": None
        if cost is None
        else {
            "workers": cost.workers,
            "steps": cost.steps,
            "seconds_here": finite(cost.cpu_seconds),
            "seconds_evaluation_here": finite(cost.eval_seconds),
            "evaluated_examples": cost.evaluated_examples,
            "seconds_gpu": finite(cost.gpu_seconds),
            "gpu_source": cost.gpu_source,
            "step_seconds": [
                {"arch": t.arch, "batch_size": t.batch_size, "seconds": t.seconds, "measured_batch": t.measured_batch}
                for t in cost.step_times
            ],
            "not_counted": cost.unknown,
            "upper_bound": any(cell.patience for cell in plan.cells),  # --patience: time for the caps
        },
        "disk_bytes": {"peak": disk.peak, "kept": disk.kept, "artifacts": disk.artifacts},
    }


def groups_table(report, width: int | None = None) -> Table:
    """Groups by what tells them apart; what they all share goes once, under the table. A group
    that did not train, or of which no run ended, says so in its spread column. ``width``: the
    console's, so that no label breaks mid-word where there is room."""
    from initmem_core.report.render import (  # lazy: keeps the report code out of the CLI's start-up
        DASH,
        debiased_cell,
        formatted,
        spread_cell,
    )

    headers = ["group", "spread pp", "debiased pp [95% CI]", "best σ", "worst σ", "σ never interpolated", "runs fit"]
    rows = [
        [
            g.label,
            spread_cell(g),  # "did not train", not a dash
            DASH if g.did_not_train or not g.runs_ran else debiased_cell(g),
            formatted("sigma", g.best_sigma),
            formatted("sigma", g.worst_sigma),
            str(g.never_interp_sigmas),
            f"{g.runs_fit}/{g.runs_ran}",
            str(g.failed),
        ]
        for g in report.groups
    ]
    return one_table(
        "initialization memory per group",
        [*headers, "failed"],
        rows,
        width,
        right=tuple(range(1, len(headers) + 1)),
        caption=f"every group: {report.shared}" if report.shared else None,
    )


def verdicts_table(report, width: int | None = None) -> Table | None:
    """Each claim the sweep evaluated and its verdict, with the regime's reasons (runs that did not
    fit, a horizon short of the mechanism): the closing lines a sweep prints."""
    from initmem_core.report.assessment import evaluated  # lazy: keeps the report code out of the CLI's start-up

    done = evaluated(report.findings)
    if not done:
        return None
    return one_table(
        "claims on this sweep (`initmem report` has their numbers)",
        ["claim", "verdict"],
        [[finding.name, finding.verdict_text] for finding in done],
        width,
    )


def failures_table(failed) -> Table:
    table = Table(title="failed cells", title_style="red")
    for header in ("cell", "status", "run id", "error"):
        table.add_column(header, overflow="fold")
    for cell in failed:
        table.add_row(cell.label, cell.status, cell.run_id, cell.error)
    return table


#: The threads a sweep's cells run with when --threads is left out (the executors' ``pin``).
CELL_THREADS_SHOWN = "1 per cell with --executor local; ray and slurm: --cpus-per-cell"


@with_config_options(as_text=True, shown={"threads": CELL_THREADS_SHOWN})
@user_errors
def sweep_command(
    config_values: dict[str, Any],
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help=(
                "TOML sweep file: name, \\[base] fixed values, \\[grid] lists or ranges; options given here override it"
            ),
            rich_help_panel=SWEEP,
        ),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            help="Start from one of the paper's presets (see `initmem presets`); --config and options override it",
            rich_help_panel=SWEEP,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            help=(
                "Sweep name (default: generated from the grid, and printed; a preset's, with any override, "
                "e.g. paper-mini+epochs=3); relaunching a name with the same grid resumes that sweep"
            ),
            rich_help_panel=SWEEP,
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the cells and the estimated work; run nothing", rich_help_panel=SWEEP),
    ] = False,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed",
            help=(
                "Run again the cells that diverged in an earlier launch (a divergence "
                "is otherwise final; other failures always run again)"
            ),
            rich_help_panel=SWEEP,
        ),
    ] = False,
    extend: Annotated[
        bool,
        typer.Option(
            "--extend",
            help=(
                "Add this launch's cells to the sweep --name, whose grid differs (a sweep's name is bound "
                "to its grid: a relaunch with other cells is otherwise refused)"
            ),
            rich_help_panel=SWEEP,
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Folder for the report's table and plots (default: initmem-output/<name>)", rich_help_panel=SWEEP
        ),
    ] = None,
    executor_name: Annotated[
        str,
        typer.Option(
            "--executor",
            help=(
                "Where cells run: local (this machine), ray (a Ray cluster), slurm, or another registered "
                "executor (initmem plugins); ray and slurm need a tracking server http://host:port "
                "(see docs/distributed.md)"
            ),
            rich_help_panel=EXECUTOR,
        ),
    ] = "local",
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help=(
                "local: cells run in parallel, each in its own process; every cell uses --threads torch "
                "threads (default 1 in a sweep), so its numbers do not depend on --workers"
            ),
            show_default="1",
            rich_help_panel=EXECUTOR,
        ),
    ] = None,
    lockstep: Annotated[
        str | None,
        typer.Option(
            help=(
                "local, ray, slurm: auto, on or off: train the cells that differ only in sigma as one fused "
                "model a job (one worker's, or one task with one cell's resources; architectures and "
                "optimizers that declare it; auto: only where measured to pay, see docs/PERFORMANCE.md); "
                "each cell keeps its own run"
            ),
            show_default="auto",
            rich_help_panel=EXECUTOR,
        ),
    ] = None,
    lockstep_max: Annotated[
        int | None,
        typer.Option(
            help="local, ray, slurm: at most this many models in one fused job",
            show_default="8",
            rich_help_panel=EXECUTOR,
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="ray: the cluster to join, auto (the one this machine is part of) or host:port",
            show_default="start a Ray instance on this machine",
            rich_help_panel=EXECUTOR,
        ),
    ] = None,
    cpus_per_cell: Annotated[
        float | None,
        typer.Option(
            help="ray, slurm: CPUs each cell gets; torch uses as many threads unless --threads",
            show_default="1",
            rich_help_panel=EXECUTOR,
        ),
    ] = None,
    gpus_per_cell: Annotated[
        float | None,
        typer.Option(
            help=(
                "ray, slurm: GPUs each cell gets; a fraction shares a GPU (0.25: four "
                "cells per GPU; Slurm takes 1/k and runs k cells in one task)"
            ),
            show_default="0",
            rich_help_panel=EXECUTOR,
        ),
    ] = None,
    max_retries: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="ray: times a cell whose worker process died is run again",
            show_default="3",
            rich_help_panel=EXECUTOR,
        ),
    ] = None,
    slurm_partition: Annotated[
        str | None, typer.Option(help="slurm: the partition", show_default="the cluster's", rich_help_panel=EXECUTOR)
    ] = None,
    slurm_time: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="slurm: time limit of each cell's job, in minutes; a cell that reaches it is requeued and resumes",
            show_default="60",
            rich_help_panel=EXECUTOR,
        ),
    ] = None,
    slurm_option: Annotated[
        list[str] | None,
        typer.Option(
            help=(
                "slurm: any other sbatch option as KEY=VALUE, e.g. "
                "account=myproject, qos=high, mem=32G; repeat for more"
            ),
            rich_help_panel=EXECUTOR,
        ),
    ] = None,
    slurm_local: Annotated[
        bool,
        typer.Option(
            "--slurm-local",
            help=(
                "slurm: run the jobs as processes on this machine (submitit's "
                "LocalExecutor), to try a sweep where there is no Slurm"
            ),
            rich_help_panel=EXECUTOR,
        ),
    ] = False,
    system_metrics: Annotated[
        bool,
        typer.Option(
            "--system-metrics",
            help=(
                "Record MLflow's system metrics (CPU, memory, disk, network; GPUs with the gpu-metrics "
                "extra) on the sweep's parent run while it runs"
            ),
            rich_help_panel="Tracking",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP, rich_help_panel=SWEEP)] = False,
    experiment: Experiment = DEFAULT_EXPERIMENT,
    tracking_uri: TrackingUri = None,
) -> None:
    """Run a grid of runs, e.g. `initmem sweep --sigma 0.1:2.5:7 --opt sgd,adam --workers 2`.

    On a cluster: `--executor ray --ray-address auto` or `--executor slurm`, with `--tracking-uri http://host:5000`.

    Any run option takes a list (a,b,c) or, for numbers, a range start:stop:count.
    """
    from initmem_core.sweep.grid import (  # lazy: keeps sweep.grid out of the CLI's start-up
        SweepSpec,
        plan_sweep,
        spec_from_toml,
        spec_from_values,
    )
    from initmem_core.sweep.presets import preset_spec  # lazy: imports sweep.grid, kept out of the CLI's start-up

    spec = preset_spec(preset) if preset else SweepSpec()
    if config:
        spec = spec.override(spec_from_toml(config)) if preset else spec_from_toml(config)
    spec = spec.override(spec_from_values(config_values))
    registry = get_registry()
    plan = plan_sweep(spec, name=name, out=out, registry=registry)
    given = with_file_options(
        {
            "workers": workers,
            "lockstep": lockstep,
            "lockstep_max": lockstep_max,
            "address": ray_address,
            "cpus_per_cell": cpus_per_cell,
            "gpus_per_cell": gpus_per_cell,
            "max_retries": max_retries,
            "partition": slurm_partition,
            "time_min": slurm_time,
            "options": slurm_option,
            "local": slurm_local,
        },
        preset,
        config,
        executor_name,
        registry,
    )
    executor = build_executor(executor_name, plan.out, given, registry)
    output = ScriptOutput(as_json)
    with output.redirected():
        _sweep_or_dry_run(
            plan, executor, output, dry_run, workers, tracking_uri, experiment, retry_failed, system_metrics, extend
        )


def dry_run_here(
    plan, output: ScriptOutput, workers, tracking_uri, experiment, retry_failed, extend, executor=None
) -> None:
    """``--dry-run``: what a launch would do now (``dry_run``), its cost and the regime it reaches."""
    from initmem_core.sweep.cost import estimate_cost  # lazy: measures a step with torch
    from initmem_core.sweep.disk import disk_text, estimate_disk  # lazy: keeps torch out of the CLI's start-up
    from initmem_core.training.plan import plan_horizons  # lazy: keeps the training code out of the start-up

    from .dry_run import TO_RUN, forecast_claims, needed, read_store, work_of  # lazy: the store, torch

    console = output.console
    store = read_store(plan, tracking_uri, experiment, retry_failed, extend)  # a changed grid: one line, no plan
    horizons = plan_horizons(plan.plans)  # sizes each dataset once
    forecasts = forecasts_of(plan, horizons)
    testable = forecast_claims(plan.cells)
    needs = {f.group: needed(plan, f) for f in forecasts if f.short and f.clock in testable}
    run = [index for index, state in enumerate(store.states) if state == TO_RUN]
    plans, ends = [plan.plans[i] for i in run], [horizons[i] for i in run]
    # Each model to run is built (and timed) before any plan is printed: an unknown one is one line alone.
    cost = estimate_cost(plans, workers=workers or 1, horizons=ends) if run else None
    disk = estimate_disk(plans, workers or 1)
    work = work_of([p.config for p in plans], ends)
    console.print(f"sweep [bold]{plan.name}[/bold]")
    if not output.as_json:  # the JSON holds every cell: no tables on stderr
        regime = regime_table(plan, forecasts, testable, needs)
        console.print(*dry_run_tables(plan, horizons, store.states), regime if regime.row_count else "")
        if not regime.row_count:
            console.print("the regime: no claim these groups can test needs a clock to reach a threshold")
    console.print(
        f"{store.line(len(set(plan.groups)))}; estimated work of those to run: {work['text']}", soft_wrap=True
    )
    for line in cost_lines(cost) if cost else []:
        console.print(line, highlight=False, soft_wrap=True)
    for line in adaptive_lines([plan.cells[i] for i in run]):
        console.print(line, highlight=False, soft_wrap=True)
    if cost is not None:  # which cells the executor fuses (lockstep), and the time each way
        for line in getattr(executor, "dry_run_lines", lambda *_: [])([plan.cells[i] for i in run], cost.cpu_seconds):
            console.print(line, highlight=False, soft_wrap=True)
    console.print(disk_text(disk))
    output.emit(dry_run_document(plan, horizons, cost, disk, work, forecasts, store, testable, needs))


def _sweep_or_dry_run(
    plan,
    executor,
    output: ScriptOutput,
    dry_run,
    workers,
    tracking_uri,
    experiment,
    retry_failed,
    system_metrics,
    extend=False,
) -> None:
    from initmem_core.sweep.launch import (  # lazy: keeps the sweep, training and report code out of the CLI's start-up
        run_sweep,
    )

    if dry_run:  # it names the sweep once its models are built (an unknown one: one line)
        dry_run_here(plan, output, workers, tracking_uri, experiment, retry_failed, extend, executor)
        return
    console = output.console
    console.print(f"sweep [bold]{plan.name}[/bold]")

    from .sweep_progress import SweepDisplay  # lazy: keeps rich.progress out of the CLI's start-up

    where = f"{workers or 1} worker(s)" if executor.name == "local" else f"executor {executor.name}"
    console.print(f"{len(plan.cells)} cells, {where}")

    handled_from_here()  # a Ctrl-C from here on stops the cells and marks them KILLED
    try:
        with SweepDisplay(console) as display:
            result = run_sweep(
                plan,
                executor=executor,
                tracking_uri=tracking_uri,
                experiment=experiment,
                progress=display,
                retry_failed=retry_failed,
                system_metrics=system_metrics,
                extend=extend,
            )
    except KeyboardInterrupt:
        # The first Ctrl-C ends the sweep, whose cells are stopped by now; another one during the
        # exit (a second key press, or the terminal's signal arriving late, after a worker's death
        # had already interrupted the sweep) would end it killed by SIGINT instead of with code 130.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise fail(f"interrupted; launch `initmem sweep ... --name {plan.name}` again to resume", 130) from None
    console.print(groups_table(result.report, console.width))
    if (verdicts := verdicts_table(result.report, console.width)) is not None:
        console.print(verdicts)
    skipped = sum(cell.skipped for cell in result.cells)
    finished_now = sum(not cell.skipped and cell.status == FINISHED for cell in result.cells)
    console.print(
        f"{len(result.cells)} cells: {finished_now} ran, "
        f"{skipped} skipped (ended before: finished or diverged), {len(result.failed)} failed"
    )
    console.print(
        f"report and plots: {result.files[0].parent}   parent run: [bold]{result.parent_run_id}[/bold]"
        f"   (`initmem report {plan.name}`, `initmem ui`)"
    )
    if result.unsynced:  # the report lacks what the store did not take
        uri = resolve_tracking_uri(tracking_uri)
        labels = ", ".join(cell.label for cell in result.unsynced[:3]) + (", ..." if len(result.unsynced) > 3 else "")
        console.print(
            f"[yellow]{len(result.unsynced)} cell(s) ({labels}) ended with writes the store did not take; "
            f"it shows them RUNNING and the report lacks them: run `initmem sync --tracking-uri {uri}`, "
            f"then `initmem report {plan.name} --tracking-uri {uri}`[/yellow]",
            markup=True,
            highlight=False,
        )
    output.emit(sweep_document(plan, result, finished_now, skipped))
    if result.failed:
        console.print(failures_table(result.failed))
        raise typer.Exit(1)


def sweep_document(plan, result, finished_now: int, skipped: int) -> dict[str, Any]:
    """What ``initmem sweep --json`` prints once the sweep has ended."""
    from collections import Counter

    return {
        "sweep": plan.name,
        "parent_run_id": result.parent_run_id,
        "report_folder": str(result.files[0].parent) if result.files else str(plan.out),
        "outcomes": {
            "ran": finished_now,
            "skipped": skipped,
            "failed": len(result.failed),
            "unsynced": len(result.unsynced),
            "by_status": dict(Counter(cell.status for cell in result.cells)),
        },
        "cells": [
            {
                "label": cell.label,
                CONFIG_HASH_TAG: cell.config_hash,
                "run_id": cell.run_id,
                "status": cell.status,
                "skipped": cell.skipped,
                "error": cell.error or None,
            }
            for cell in result.cells
        ],
    }
