"""Check the paper's findings on a sweep:
`python -m benchmarks.paper_check [--preset NAME | --sweep NAME | --from FILE] [--workers 2]`.

Without --sweep it runs a preset (`paper-mini` by default, or `--preset paper-fmnist
[--data-dir DIR]`; relaunching resumes it), then evaluates every claim of docs/PAPER.md on the results, prints
each claim as reproduced / contradicted / not resolved at this scale with its numbers and 95%
intervals, and writes the sweep's page, docs/results/<sweep>.md, with the main plots, and
docs/RESULTS.md around the pages (the other sweeps' pages and RESULTS.md's part written by hand
stay as they are: benchmarks/results_page.py). A claim is reproduced only when the
interval of its difference excludes zero in the claimed direction (plugins/claims/paper.py).

With `--from docs/results/NAME.json.gz` (repeatable; `initmem export NAME --out FILE` writes one) it
reads a sweep's export instead of a tracking store, and needs no store. The page's opening table of
every claim is rebuilt from every export given and every one in docs/results/ and in its folders of
confirmatory exports, docs/results/confirmatory/ and docs/results/confirmatory-2/, one per registration of
docs/PREREGISTRATION.md (plugins/claims/findings_table.py), with the first registration's reading under
its own rule read from docs/results/confirmatory/registered-reading.json; a page with no exports to
read keeps the table it has. Every page and the table, from the committed exports:
`python -m benchmarks.paper_check --from docs/results/*.json.gz --from docs/results/confirmatory/*.json.gz`
(one --from per file, as the shell expands the globs).
"""

from __future__ import annotations

import argparse
from datetime import date
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.machine_info import describe
from benchmarks.results_page import PAGES, rewrite_results, shift_headings
from initmem_plugins.claims import findings_table
from initmem_plugins.claims.findings_table import preset_to_run, when_cells_ran
from initmem_plugins.figures import FILES

ROOT = Path(__file__).resolve().parents[1]
#: The report's figures, as a sweep's page shows them (the claims' forest plot, verdicts.png, last).
PLOTS = FILES


def machine() -> str:
    import torch

    return f"{describe()}, torch {torch.__version__}"


def caveats(report) -> str:
    """What limits the reading of the claims: groups whose runs did not all fit their training set."""
    lines = [
        f"- `{g.group}`: {g.runs_ran - g.runs_fit} of {g.runs_ran} runs' selected predictors did not fit their "
        "training set, so every claim that compares this group reads under-trained (report/regime.py)."
        for g in report.groups
        if g.runs_fit < g.runs_ran
    ]
    lines += [
        f"- `{g.group}`: did not train (best mean accuracy {g.best_acc:.1f}%, within a few points of "
        "chance); it has no spread and is left out of every claim."
        for g in report.groups
        if g.did_not_train
    ]
    return "\n".join(lines) or "- Every run of every group fit its training set."


def cells_wall_seconds(name: str, tracking_uri: str | None) -> float | None:
    """From the first cell's start to the last cell's end, as the store recorded them (for a sweep
    launched more than once, the pauses between launches count too)."""
    from initmem_core.tracking.client import open_client
    from initmem_core.tracking.records import search_all
    from initmem_core.vocabulary import SWEEP_TAG

    client = open_client(tracking_uri)
    experiment = client.get_experiment_by_name("initmem")
    runs = (
        [
            r
            for r in search_all(client, [experiment.experiment_id], f"tags.`{SWEEP_TAG}` = '{name}'")
            if "mlflow.parentRunId" in r.data.tags and r.info.end_time
        ]
        if experiment
        else []
    )
    if not runs:
        return None
    return (max(r.info.end_time for r in runs) - min(r.info.start_time for r in runs)) / 1000


#: Where a sweep's export is kept, under --docs: results/<sweep>.json.gz; under it, each registration's
#: pre-registered sweeps' exports (docs/PREREGISTRATION.md), their own columns
#: (``findings_table.CONFIRMATORY_FOLDERS``), the first one's frozen reading beside them.
RESULTS_FOLDER = "results"


def sweep_page(
    name: str,
    preset: str,
    findings,
    report,
    report_md: str,
    seconds: float | None,
    data_dir: str = "",
    ran: str = "",
    again: str = "",
) -> str:
    """One sweep's page, docs/results/<name>.md: its claims, caveats, plots (``docs/images/<name>/``)
    and full report. ``data_dir``: where the sweep read its dataset from, if it was told (the command
    to rerun it says so). ``ran`` and ``again``, when given, say where and when it ran and how to
    regenerate the page (default: this machine, today, and the preset or sweep)."""
    rows = "\n".join(f"| {f.claim} | {f.measured.replace('|', '/')} | {f.verdict} |" for f in findings)
    took = f" in {seconds / 60:.1f} minutes" if seconds else ""
    plots = "\n\n".join(f"![{name}: {p[:-4]}](../images/{name}/{p})" for p in PLOTS)
    report_md = shift_headings(report_md, 1).rstrip("\n")
    data = " --data-dir DIR" if data_dir else ""
    again = again or (
        f"`python -m benchmarks.paper_check --preset {preset}{data}` (or `--sweep {name}` to re-read the sweep)"
        if preset
        else f"`python -m benchmarks.paper_check --sweep {name}`"
    )
    ran = ran or f"Run{took} on {machine()}, {date.today()}"
    return f"""# Sweep `{name}`{f" (preset `{preset}`)" if preset else ""}

One sweep's report, listed in [RESULTS.md](../RESULTS.md) (which says what its words mean). {ran}.
Regenerate this page with {again}.

| claim ([PAPER.md](../PAPER.md)) | measured (95% intervals) | verdict |
|---|---|---|
{rows}

Reading these numbers:
{caveats(report)}

{plots}

{report_md}
"""


def evaluate(
    name: str, tracking_uri: str | None, preset: str, docs: Path, seconds: float | None, console: Console
) -> tuple[str, str]:
    """Print one sweep's findings, draw its plots into ``docs/images/<name>/``; returns its name
    (a parent run id given is read as its sweep's name) and its page."""
    from initmem_core.tracking.records import load_sweep_records

    name, records = load_sweep_records(name, tracking_uri=tracking_uri)
    if seconds is None:
        seconds = cells_wall_seconds(name, tracking_uri)
    return name, evaluate_records(name, records, preset, docs, seconds, console)[0]


def evaluate_export(path: Path, export, docs: Path, console: Console) -> tuple[str, list]:
    """``evaluate_records`` on a sweep's export (``tracking.export.read_export``): its page says
    when the cells ran (``when_cells_ran``) and how to regenerate it from the file."""
    from initmem_core.sweep.presets import preset_names

    shown = display_path(path)
    ran = f"{when_cells_ran(export)}; read from its export `{shown}`"
    again = f"`python -m benchmarks.paper_check --from {shown}`"
    preset = export.name if export.name in preset_names() else ""
    return evaluate_records(export.name, export.records, preset, docs, export.wall_seconds, console, ran, again)


def display_path(path: Path) -> str:
    """``path`` relative to the repository when it is inside it (what a reader can rerun)."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def evaluate_records(
    name: str,
    records,
    preset: str,
    docs: Path,
    seconds: float | None,
    console: Console,
    ran: str = "",
    again: str = "",
) -> tuple[str, list]:
    """Print one sweep's findings, draw its plots into ``docs/images/<name>/``; returns its
    page and its findings."""
    from initmem_core.report.assessment import build_assessed_report
    from initmem_core.report.figures import draw_figures
    from initmem_core.report.render import to_markdown

    # the report with the claims evaluated on it, as `initmem report` builds it: the page shows it
    report = build_assessed_report(records)
    findings = report.findings
    table = Table(title=f"paper findings on sweep {name}")
    for column in ("claim", "measured (95% intervals)", "verdict"):
        table.add_column(column, overflow="fold")
    colour = {True: "[green]", False: "[red]", None: "[yellow]"}
    for f in findings:
        table.add_row(f.claim, f.measured, colour[f.reproduced] + f.verdict)
    console.print(table)
    written = {path.name for path in draw_figures(report, docs / "images" / name, records=records)}
    assert set(PLOTS) <= written, f"plots missing: {set(PLOTS) - written}"
    told_data_dir = next((r.config.data_dir for r in records if r.config.data_dir), "")
    page = sweep_page(
        name,
        preset,
        findings,
        report,
        to_markdown(report, f"Full report: sweep {name}"),
        seconds,
        told_data_dir,
        ran,
        again,
    )
    return page, findings


def read_exports(paths: list[Path]) -> list[tuple[Path, object]]:
    """Each export read (``tracking.export.read_export``); a bad file stops the script in one line."""
    from initmem_core.errors import InitmemError
    from initmem_core.tracking.export import read_export

    read = []
    for path in paths:
        try:
            read.append((path, read_export(path)))
        except InitmemError as error:
            raise SystemExit(f"paper_check.py: {error}") from None
    return read


def findings_opening(given: list[tuple[Path, object, list]], docs: Path) -> str:
    """The opening table from the exports ``given`` (path, export, findings) and every other
    export under ``docs/results/``; "" when there are none. Two exports of one sweep stop the script."""
    from initmem_core.tracking.export import SUFFIX

    seen = {path.resolve() for path, _, _ in given}
    results = docs / RESULTS_FOLDER
    folders = (results, *(results / folder for folder in findings_table.CONFIRMATORY_FOLDERS))
    others = [p for folder in folders for p in sorted(folder.glob(f"*{SUFFIX}")) if p.resolve() not in seen]
    everything = [*given, *((path, export, None) for path, export in read_exports(others))]
    evaluated, files = {}, {}
    for path, export, findings in everything:
        if export.name in files:
            raise SystemExit(
                f"paper_check.py: two exports of sweep {export.name}: {files[export.name]} and {display_path(path)}"
            )
        files[export.name] = display_path(path)
        folder = path.resolve().parent.name
        registration = folder if folder in findings_table.CONFIRMATORY_FOLDERS else ""
        evaluated[export.name] = findings_table.findings_by_dataset(export, findings, registration)
    if not evaluated:
        return ""
    table = findings_table.decided_by(evaluated)
    frozen = results / findings_table.CONFIRMATORY_FOLDERS[0] / findings_table.REGISTERED_FILE
    try:
        registered = findings_table.read_registered(frozen)
        familywise = findings_table.familywise_lines(table, docs / "PREREGISTRATION.md", registered)
    except ValueError as error:
        raise SystemExit(f"paper_check.py: {error}") from None
    return findings_table.table_markdown(table, files, familywise, registered)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sweep",
        action="append",
        default=[],
        help="evaluate an existing sweep (name or parent run id) instead of running a preset; repeat for one page each",
    )
    parser.add_argument(
        "--from",
        dest="exports",
        action="append",
        type=Path,
        default=[],
        help="evaluate a sweep's export (`initmem export NAME --out FILE`, e.g. docs/results/NAME.json.gz) "
        "instead of a store; repeat for one page each",
    )
    parser.add_argument("--preset", default="paper-mini", help="the preset to run (paper-mini, paper-fmnist, ...)")
    parser.add_argument(
        "--data-dir",
        default="",
        help="where the preset's dataset files are (default: the dataset's own search, e.g. "
        "~/.cache/initmem/fashion-mnist or Debian's dataset-fashion-mnist)",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--tracking-uri",
        action="append",
        default=[],
        help="the store of each --sweep, in the same order (one: for all of them)",
    )
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="where RESULTS.md, results/ and images/ go")
    args = parser.parse_args()

    import time

    from initmem_core.sweep.launch import run_sweep
    from initmem_core.sweep.presets import preset_names

    console = Console()
    uris = args.tracking_uri or [None]
    if len(uris) not in (1, max(1, len(args.sweep))):
        parser.error("give one --tracking-uri, or one per --sweep")
    pages: dict[str, str] = {}
    given = [(path, export, None) for path, export in read_exports(args.exports)]
    if not args.sweep and not args.exports:
        started = time.perf_counter()
        result = run_sweep(preset_to_run(args.preset, args.data_dir), workers=args.workers, tracking_uri=uris[0])
        name, text = evaluate(result.name, uris[0], args.preset, args.docs, time.perf_counter() - started, console)
        pages[name] = text
    for index, name in enumerate(args.sweep):
        uri = uris[index] if len(uris) > 1 else uris[0]
        found, text = evaluate(name, uri, name if name in preset_names() else "", args.docs, None, console)
        pages[found] = text
    for index, (path, export, _) in enumerate(given):
        pages[export.name], findings = evaluate_export(path, export, args.docs, console)
        given[index] = (path, export, findings)
    results = rewrite_results(args.docs, pages, findings_opening(given, args.docs))
    console.print(
        f"wrote {len(pages)} sweep page(s) in {args.docs / PAGES} and {results} around them (the other "
        "sweeps' pages and the part written by hand kept)"
    )


if __name__ == "__main__":
    main()
