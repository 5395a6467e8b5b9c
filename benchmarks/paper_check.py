"""Check the paper's findings on a sweep: `python benchmarks/paper_check.py [--preset NAME | --sweep NAME] [--workers 2]`.

Without --sweep it runs a preset (`paper-mini` by default, or `--preset paper-fmnist`;
relaunching resumes it), then evaluates every claim of ../shared/PAPER.md on the results, prints
each claim as reproduced / contradicted / not resolved at this scale with its numbers and 95%
intervals, and writes docs/RESULTS.md with the main plots. A claim is reproduced only when the
interval of its difference excludes zero in the claimed direction (initmem_core/report/findings.py).
"""

from __future__ import annotations

import argparse
import os
import platform
from datetime import date
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
PLOTS = ("test_acc_vs_sigma.png", "weight_norm_vs_epoch.png", "spread_vs_clocks.png", "tau_interp_vs_sigma.png")


def machine() -> str:
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}"


def caveats(report) -> str:
    """What limits the reading of the claims: groups whose runs did not all interpolate."""
    lines = [f"- `{g.group}`: at {g.never_interp_sigmas} of {g.sigmas} sigmas no seed reached the "
             "interpolation threshold, so its spread mixes initialization memory with under-training."
             for g in report.groups if g.never_interp_sigmas]
    lines += [f"- `{g.group}`: did not train (best mean accuracy {g.best_acc:.1f}%, within a few points of "
              "chance); it has no spread and is left out of every claim." for g in report.groups if g.did_not_train]
    return "\n".join(lines) or "- Every group interpolated at every sigma."


def cells_wall_seconds(name: str, tracking_uri: str | None) -> float | None:
    """From the first cell's start to the last cell's end, as the store recorded them (for a sweep
    launched more than once, the pauses between launches count too)."""
    from initmem_core.tracking.records import SWEEP_TAG, search_all
    from initmem_core.tracking.store import open_client

    client = open_client(tracking_uri)
    experiment = client.get_experiment_by_name("initmem")
    runs = [r for r in search_all(client, [experiment.experiment_id], f"tags.`{SWEEP_TAG}` = '{name}'")
            if "mlflow.parentRunId" in r.data.tags and r.info.end_time] if experiment else []
    if not runs:
        return None
    return (max(r.info.end_time for r in runs) - min(r.info.start_time for r in runs)) / 1000


def results_markdown(name: str, findings, report, report_md: str, seconds: float | None,
                     preset: str = "paper-mini") -> str:
    rows = "\n".join(f"| {f.claim} | {f.measured.replace('|', '/')} | {f.verdict} |" for f in findings)
    took = f" in {seconds / 60:.1f} minutes" if seconds else ""
    plots = "\n\n".join(f"![{p[:-4]}](images/{p})" for p in PLOTS)
    return f"""# Results: the paper's findings at mini scale

Sweep `{name}` (preset `{preset}`), run{took} on {machine()}, {date.today()}.
Regenerate with `python benchmarks/paper_check.py --preset {preset}` (add `--sweep {name}` to re-read an existing sweep).

| claim (../shared/PAPER.md) | measured (95% intervals) | verdict |
|---|---|---|
{rows}

Accuracies are test accuracy at each run's best-validation-loss epoch; spread is max - min over
sigma of the mean over seeds, in percentage points, with a 95% bootstrap interval over seeds and
test examples. A claim is *reproduced* only when the interval of the relevant difference
excludes zero in the claimed direction, *contradicted* when it excludes zero the other way, and
otherwise *not resolved at this scale* (`initmem_core/report/findings.py`); nothing here was
tuned toward the paper's answer.

Reading these numbers:
{caveats(report)}

{plots}

{report_md}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", help="evaluate an existing sweep (name or parent run id) instead of running a preset")
    parser.add_argument("--preset", default="paper-mini", help="the preset to run (paper-mini, paper-fmnist, ...)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="where RESULTS.md and images/ go")
    args = parser.parse_args()

    import time

    from initmem_core.report.findings import evaluate_findings
    from initmem_core.sweep.presets import preset_spec
    from initmem_core.tracking.records import load_sweep_records
    from initmem_core.report.memory import build_report, to_markdown
    from initmem_core.report.plots import write_plots
    from initmem_core.sweep.launch import run_sweep

    console = Console()
    seconds = None
    name = args.sweep
    if name is None:
        started = time.perf_counter()
        result = run_sweep(preset_spec(args.preset), workers=args.workers, tracking_uri=args.tracking_uri)
        seconds, name = time.perf_counter() - started, result.name
    name, records = load_sweep_records(name, tracking_uri=args.tracking_uri)
    if seconds is None:
        seconds = cells_wall_seconds(name, args.tracking_uri)
    findings = evaluate_findings(records)

    table = Table(title=f"paper findings on sweep {name}")
    for column in ("claim", "measured (95% intervals)", "verdict"):
        table.add_column(column, overflow="fold")
    colour = {True: "[green]", False: "[red]", None: "[yellow]"}
    for f in findings:
        table.add_row(f.claim, f.measured, colour[f.reproduced] + f.verdict)
    console.print(table)

    report = build_report(records)
    images = args.docs / "images"
    images.mkdir(parents=True, exist_ok=True)
    written = {path.name for path in write_plots(report, images)}
    assert set(PLOTS) <= written, f"plots missing: {set(PLOTS) - written}"
    (args.docs / "RESULTS.md").write_text(
        results_markdown(name, findings, report, to_markdown(report, f"Full report: sweep {name}"), seconds,
                         args.preset))
    console.print(f"wrote {args.docs / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
