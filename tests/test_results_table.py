"""RESULTS.md's opening table and each sweep's page (docs/results/<sweep>.md) are rebuilt from the
sweeps' exports (plugins/claims/findings_table.py, benchmarks/paper_check.py): every number in the
table is what the exports give, so a number edited by hand is found."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from benchmarks.results_page import OLD_HAND_BELOW
from initmem_core.report.verdicts import NOT_EVALUATED
from initmem_core.tracking.export import SweepExport, read_export, write_export
from initmem_plugins.claims import findings_table
from initmem_plugins.claims.paper import CLAIMS, evaluate_findings
from tests.builders import REMEMBERING_WORLD, records
from tests.long_commands import benchmark, run_command

DOCS = Path(__file__).resolve().parents[1] / "docs"
OLD_PAGE = f"""# Results

<!-- findings table: begin (written by hand; paper_check.py keeps it) -->
| finding | digits |
|---|---|
| one | **reproduced** +9.99 [+1.00, +2.00] |
<!-- findings table: end -->

One section per sweep.

{OLD_HAND_BELOW}
## Notes

by hand, 1.23 stays
"""


def fixture_exports(results: Path) -> list[Path]:
    """Three small exports: two on digits (the second with SGD's batch groups alone, so the batch
    claim is decided by both), one on Fashion-MNIST."""
    batches = {k: v for k, v in REMEMBERING_WORLD.items() if k in ("sgd", "sgd-big-batch", "sgd-small-batch")}
    made = {
        "world-digits": records(REMEMBERING_WORLD, seeds=4, data="digits"),
        "batch-digits": records(batches, seeds=5, data="digits"),
        "world-fmnist": records(REMEMBERING_WORLD, seeds=3, data="fashion-mnist"),
    }
    paths = []
    for name, cells in made.items():
        write_export(SweepExport(name, cells), results / f"{name}.json.gz")
        paths.append(results / f"{name}.json.gz")
    return paths


def table_cells(page: str) -> dict[str, list[str]]:
    """claim name -> its row's cells after the claim (one per dataset), from the page's opening table."""
    rows = {}
    for line in findings_table.page_table(page).splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) > 2 and cells[0].isdigit():
            rows[re.findall(r"`(\w+)`\)$", cells[1])[0]] = cells[2:]
    return rows


def expected_numbers(paths: list[Path]) -> dict[tuple[str, str], list[str]]:
    """(claim, dataset) -> the numbers its cell must show: for each export that evaluates the claim
    on that dataset, in name order, its key quantity's label numbers, estimate and interval."""
    found: dict[tuple[str, str], list[str]] = {}
    for export in sorted((read_export(p) for p in paths), key=lambda e: e.name):
        (data,) = export.datasets
        for f in evaluate_findings(export.records):
            if f.verdict == NOT_EVALUATED:
                continue
            q = f.key
            shown = [f"{v:+.2f}" for v in (q.estimate, q.lo, q.hi)] if q.decided else [f"{q.estimate:+.2f}"]
            extra = [] if q.decided else findings_table.numbers(q.reason)
            found.setdefault((f.name, data), []).extend([*findings_table.numbers(q.label), *shown, *extra])
    return found


def number_problems(page: str, paths: list[Path]) -> list[str]:
    """Where the page's table shows numbers other than the exports give (export names left out)."""
    wanted = expected_numbers(paths)
    rows = table_cells(page)
    problems = [] if list(rows) == [c.__name__ for c in CLAIMS] else [f"rows {list(rows)}"]
    for claim, cells in rows.items():
        for data, cell in zip(("digits", "fashion-mnist"), cells):
            shown = findings_table.numbers(re.sub(r"`[^`]*`", "", cell).replace("−", "-"))
            want = [n.replace("−", "-") for n in wanted.get((claim, data), [])]
            if shown != want or (not want and cell != findings_table.NOT_RUN):
                problems.append(f"{claim} on {data}: {cell!r} shows {shown}, the exports give {want}")
    return problems


def paper_check(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m benchmarks.paper_check ARGS`` run in ``folder``, as a user runs it."""
    return run_command(benchmark("paper_check", *args), folder, timeout_s=600)


@pytest.mark.slow(seconds=35)  # draws three sweeps' plots
def test_paper_check_rebuilds_the_page_from_exports_alone(tmp_path):
    docs = tmp_path / "docs"
    paths = fixture_exports(docs / "results")
    (docs / "RESULTS.md").write_text(OLD_PAGE)
    # Two given on the command line, the third found in docs/results/.
    done = paper_check(tmp_path, "--docs", str(docs), "--from", str(paths[0]), "--from", str(paths[2]))
    assert done.returncode == 0, done.stderr[-3000:]
    page = (docs / "RESULTS.md").read_text()
    assert "+9.99" not in page and "written by hand; paper_check.py keeps it" not in page
    assert "## Notes\n\nby hand, 1.23 stays\n" in page and page.index("by hand, 1.23") > page.index(findings_table.END)
    pages = {path.stem: path.read_text() for path in (docs / "results").glob("*.md")}
    assert sorted(pages) == ["world-digits", "world-fmnist"]
    assert all(f"(results/{name}.md)" in page for name in pages) and "## Sweep" not in page
    digits = pages["world-digits"]
    assert digits.startswith("# Sweep `world-digits`\n") and "](../images/world-digits/verdicts.png)" in digits
    assert f"Regenerate this page with `python -m benchmarks.paper_check --from {paths[0]}`" in digits
    assert (docs / "images" / "world-digits" / "verdicts.png").exists()
    assert number_problems(page, paths) == []
    rows = table_cells(page)
    batch = rows["larger_batch_increases_spread"][0]
    assert batch.index("`batch-digits`") < batch.index("`world-digits`")  # decided by both, each named
    # Columns: digits, Fashion-MNIST, then digits confirmatory (always shown; here no export has it).
    assert rows["forgetting_follows_the_clocks"] == [findings_table.NOT_RUN] * 3  # no histories anywhere
    assert all(cells[2] == findings_table.NOT_RUN for cells in rows.values())
    assert rows["sgd_remembers_more_than_adaptive"][1] != findings_table.NOT_RUN
    evaluated = {read_export(p).name: findings_table.findings_by_dataset(read_export(p)) for p in paths}
    table, files = findings_table.decided_by(evaluated), {read_export(p).name: str(p) for p in paths}
    assert findings_table.table_problems(page, table, files) == []

    # A number edited by hand, anywhere in the table, is found by both checks.
    cell = rows["sgd_remembers_more_than_adaptive"][0]
    first = re.search(r"[+\-]\d+\.\d\d", cell).group()
    edited = page.replace(cell, cell.replace(first, f"{float(first) + 0.01:+.2f}", 1), 1)
    assert edited != page
    assert number_problems(edited, paths) and findings_table.table_problems(edited, table, files)

    # Regenerating again from the same exports gives the same page.
    assert paper_check(tmp_path, "--docs", str(docs), "--from", str(paths[1])).returncode == 0
    again = (docs / "RESULTS.md").read_text()
    assert findings_table.page_table(again) == findings_table.page_table(page) and "(results/batch-digits.md)" in again
    assert (docs / "results" / "world-digits.md").read_text() == digits


@pytest.mark.slow(seconds=20)  # two processes importing the report
def test_a_bad_export_stops_paper_check_in_one_line(tmp_path):
    (tmp_path / "bad.json.gz").write_text("not an export")
    for path in (tmp_path / "bad.json.gz", tmp_path / "missing.json.gz"):
        done = paper_check(tmp_path, "--docs", str(tmp_path), "--from", str(path))
        message = done.stderr.strip()
        assert done.returncode != 0 and message.startswith("paper_check.py: ") and str(path) in message
        assert "\n" not in message and "Traceback" not in done.stderr
    assert not (tmp_path / "RESULTS.md").exists()


@pytest.mark.slow(seconds=20)  # evaluates every committed export
def test_the_results_page_table_is_what_the_committed_exports_give():
    paths = sorted((DOCS / "results").glob("*.json.gz"))
    confirmatory = sorted((DOCS / "results" / "confirmatory").glob("*.json.gz"))
    if not paths:
        pytest.skip("no exports in docs/results/ yet: the page's table is checked once there are")
    page = (DOCS / "RESULTS.md").read_text()
    evaluated, files = {}, {}
    for path in [*paths, *confirmatory]:
        export = read_export(path)
        evaluated[export.name] = findings_table.findings_by_dataset(export, confirmatory=path in confirmatory)
        files[export.name] = path.relative_to(DOCS.parent).as_posix()
    table = findings_table.decided_by(evaluated)
    familywise = findings_table.familywise_line(table, findings_table.preregistered(DOCS / "PREREGISTRATION.md"))
    assert findings_table.table_problems(page, table, files, familywise) == []


def test_confirmatory_exports_have_their_own_columns_and_the_family_wise_line_counts_them(tmp_path):
    page = tmp_path / "PREREGISTRATION.md"
    page.write_text(
        "<!-- confirmatory presets: begin -->\n| preset | seeds | groups | decides | also |\n|---|---|---|---|---|\n"
        "| `conf-world` | 1000-1003 | x | `sgd_remembers_more_than_adaptive`, `adaptive_optimizers_forget` | "
        "`sgd_keeps_memory` |\n| `conf-never-ran` | 1010-1013 | x | `larger_batch_increases_spread` | |\n"
        "<!-- confirmatory presets: end -->\n"
    )
    decides = findings_table.preregistered(page)
    assert decides["conf-world"][-1] == "sgd_keeps_memory" and len(decides) == 2
    explored = SweepExport("world-digits", records(REMEMBERING_WORLD, seeds=4, data="digits"))
    confirmed = SweepExport("conf-world", records(REMEMBERING_WORLD, seeds=4, data="digits"))
    evaluated = {
        "world-digits": findings_table.findings_by_dataset(explored),
        "conf-world": findings_table.findings_by_dataset(confirmed, confirmatory=True),
    }
    table = findings_table.decided_by(evaluated)
    row = table["sgd_remembers_more_than_adaptive"]
    assert [d.export for d in row["digits"]] == ["world-digits"]
    assert [d.export for d in row["digits/confirmatory"]] == ["conf-world"]
    verdicts = [table[name]["digits/confirmatory"][0].verdict for name in decides["conf-world"]]
    line = findings_table.familywise_line(table, decides)
    decided = sum(v in ("reproduced", "contradicted") for v in verdicts)
    assert "3 of the 4 pre-registered verdicts have run" in line and f"; {decided} decided" in line
    assert f"at most {0.06 * decided:.2f} false" in line
    markdown = findings_table.table_markdown(table, {"world-digits": "a", "conf-world": "b"}, line)
    header = next(row for row in markdown.splitlines() if row.startswith("| #"))
    assert "digits, exploratory" in header and "digits, confirmatory" in header and line in markdown
