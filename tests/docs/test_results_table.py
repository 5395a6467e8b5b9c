"""RESULTS.md's opening table and each sweep's page (docs/results/<sweep>.md) are rebuilt from the
sweeps' exports (plugins/claims/findings_table.py, benchmarks/paper_check.py): every number in the
table is what the exports give, so a number edited by hand is found. The first registration's
reading under its own rule is frozen beside its exports and held equal to the page that showed it;
the second registration's presets are read from its table and counted once per claim and dataset."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from benchmarks.results_page import OLD_HAND_BELOW
from initmem_core.report.verdicts import NOT_EVALUATED
from initmem_core.tracking.export import SweepExport, read_export, write_export
from initmem_plugins.claims import findings_table
from initmem_plugins.claims.declared import STATEMENTS
from tests.support import ROOT
from tests.support.builders import REMEMBERING_WORLD, records
from tests.support.long_commands import benchmark, run_command

DOCS = ROOT / "docs"
FROZEN = DOCS / "results" / "confirmatory" / findings_table.REGISTERED_FILE
#: The paper's claims, in the plugin's order: the table's rows.
PAPER_CLAIMS = list(STATEMENTS)
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
        for f in findings_table.evaluate_paper(export.records):
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
    problems = [] if list(rows) == PAPER_CLAIMS else [f"rows {list(rows)}"]
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
    # Columns: digits, Fashion-MNIST, then the registrations' (always shown; here no export has them).
    assert rows["forgetting_follows_the_clocks"] == [findings_table.NOT_RUN] * 5  # no histories anywhere
    assert all(cells[2:] == [findings_table.NOT_RUN] * 3 for cells in rows.values())
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
    if not paths:
        pytest.skip("no exports in docs/results/ yet: the page's table is checked once there are")
    page = (DOCS / "RESULTS.md").read_text()
    evaluated, files = {}, {}
    folders = {"": paths}
    folders.update({f: sorted((DOCS / "results" / f).glob("*.json.gz")) for f in findings_table.CONFIRMATORY_FOLDERS})
    for folder, found in folders.items():
        for path in found:
            export = read_export(path)
            evaluated[export.name] = findings_table.findings_by_dataset(export, folder=folder)
            files[export.name] = path.relative_to(ROOT).as_posix()
    table = findings_table.decided_by(evaluated)
    registered = findings_table.read_registered(FROZEN)
    familywise = findings_table.familywise_lines(table, DOCS / "PREREGISTRATION.md", registered)
    assert findings_table.table_problems(page, table, files, familywise, registered) == []


def column_of(page: str, title: str) -> dict[str, str]:
    """claim name -> its cell in the page's opening table's column whose header starts with ``title``."""
    header = next(line for line in findings_table.page_table(page).splitlines() if line.startswith("| #"))
    titles = [c.strip() for c in re.split(r"(?<!\\)\|", header)[1:-1]]
    (index,) = [i for i, t in enumerate(titles) if t.startswith(title + ":")]
    return {claim: cells[index - 2] for claim, cells in table_cells(page).items()}


def familywise_of(page: str) -> list[str]:
    return [line for line in findings_table.page_table(page).splitlines() if line.startswith("**Family-wise")]


def _git(*args: str) -> str | None:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else None


def test_the_first_registration_keeps_its_registered_reading_beside_todays():
    registered = findings_table.read_registered(FROZEN)
    assert registered is not None and registered.column == "digits/confirmatory"
    assert list(registered.cells) == PAPER_CLAIMS
    page = (DOCS / "RESULTS.md").read_text()
    # The page shows the frozen column and line word for word, today's reading of the same exports beside it.
    assert column_of(page, registered.title) == registered.cells
    today = column_of(page, f"digits, confirmatory, {findings_table.TODAY}")
    assert today != registered.cells and set(today) == set(registered.cells)
    lines = familywise_of(page)
    assert lines[0] == registered.familywise
    assert lines[1].startswith(f"**Family-wise (confirmatory, {findings_table.TODAY}):**")
    assert lines[2].startswith("**Family-wise (confirmatory-2):**") and len(lines) == 3


def test_the_registered_reading_is_the_page_of_the_commit_it_names():
    registered = findings_table.read_registered(FROZEN)
    assert registered is not None
    if _git("rev-parse", "HEAD") is None:
        pytest.skip("not a git checkout: the commits cannot be read")
    for commit in (registered.rule_commit, registered.page_commit):
        if _git("cat-file", "-e", f"{commit}^{{commit}}") is None:
            assert _git("rev-parse", "--is-shallow-repository") == "true\n", commit
            pytest.skip(f"a shallow clone: {commit[:7]} is not in it")
    assert _git("merge-base", "--is-ancestor", registered.rule_commit, registered.page_commit) is not None
    then = _git("show", f"{registered.page_commit}:docs/RESULTS.md")
    assert then is not None
    assert column_of(then, "digits, confirmatory") == registered.cells
    assert familywise_of(then) == [registered.familywise]


def test_a_frozen_reading_lacking_a_field_is_named(tmp_path):
    assert findings_table.read_registered(tmp_path / "none.json") is None
    (tmp_path / "bad.json").write_text('{"column": "digits/confirmatory", "cells": {}}')
    with pytest.raises(ValueError, match="no rule_commit, page_commit, familywise"):
        findings_table.read_registered(tmp_path / "bad.json")


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
        "conf-world": findings_table.findings_by_dataset(confirmed, folder="confirmatory"),
    }
    table = findings_table.decided_by(evaluated)
    row = table["sgd_remembers_more_than_adaptive"]
    assert [d.export for d in row["digits"]] == ["world-digits"]
    assert [d.export for d in row["digits/confirmatory"]] == ["conf-world"]
    verdicts = [table[name]["digits/confirmatory"][0].verdict for name in decides["conf-world"]]
    line = findings_table.familywise_line(table, decides)
    decided = sum(v in ("reproduced", "contradicted") for v in verdicts)
    assert "3 of the 4 pre-registered verdicts have one" in line and f"; {decided} decided" in line
    assert "none for `larger_batch_increases_spread` (`conf-never-ran`)" in line
    assert f"at most {0.06 * decided:.2f} false" in line
    markdown = findings_table.table_markdown(table, {"world-digits": "a", "conf-world": "b"}, line)
    header = next(row for row in markdown.splitlines() if row.startswith("| #"))
    assert "digits, exploratory" in header and "digits, confirmatory" in header and line in markdown


SECOND = """# Second registration

<!-- confirmatory-2 presets: begin (read by the tests) -->
| preset | seeds | data_seed | groups | decides (primary) | also decides (replication) |
|---|---|---|---|---|---|
| `conf2-fmnist` | 2000-2005 | 7 | SGD 0.01; Adam 0.004 | `sgd_keeps_memory`, `sgd_remembers_more_than_adaptive` | |
| `conf2-batch` | 2010-2015 | `7` | SGD 0.01, b = 32; 128 | `larger_batch_increases_spread` | `sgd_keeps_memory` |
| `conf2-again` | 2020-2025 | 7 | SGD 0.01 | `sgd_keeps_memory` | |
| `conf2-later` | 2030-2035 | 7 | SGD 0.01; SGD 0.32 | `larger_lr_makes_sgd_forget` | |
<!-- confirmatory-2 presets: end -->
"""


def test_the_second_registrations_presets_are_read_from_its_table(tmp_path):
    page = tmp_path / "PREREGISTRATION.md"
    page.write_text("<!-- confirmatory presets: begin -->\n<!-- confirmatory presets: end -->\n\n" + SECOND)
    presets = findings_table.second_registration(page)
    assert [p.preset for p in presets] == ["conf2-fmnist", "conf2-batch", "conf2-again", "conf2-later"]
    batch = presets[1]
    assert batch.seeds == "2010-2015" and batch.data_seed == "7"
    assert batch.primary == ("larger_batch_increases_spread",) and batch.replication == ("sgd_keeps_memory",)
    assert presets[0].primary == ("sgd_keeps_memory", "sgd_remembers_more_than_adaptive") and not presets[0].replication
    assert findings_table.preregistered(page) == {}  # the first registration's table is its own
    page.write_text("# no second registration yet\n")
    assert findings_table.second_registration(page) == []
    short = SECOND.replace("| `conf2-later` | 2030-2035 | 7 |", "| `conf2-later` | 2030-2035 |")
    page.write_text(short)
    with pytest.raises(ValueError, match="`conf2-later`.* has 5 cells, not 6"):
        findings_table.second_registration(page)
    page.write_text(SECOND.replace("`larger_lr_makes_sgd_forget`", "`larger_rate_forgets`"))
    with pytest.raises(ValueError, match="names larger_rate_forgets, not a claim"):
        findings_table.second_registration(page)


def test_the_second_registrations_family_wise_line_counts_each_claim_once_per_dataset(tmp_path):
    page = tmp_path / "PREREGISTRATION.md"
    page.write_text(SECOND)
    presets = findings_table.second_registration(page)
    made = {
        "conf2-fmnist": records(REMEMBERING_WORLD, seeds=4, data="fashion-mnist"),
        "conf2-batch": records(REMEMBERING_WORLD, seeds=4, data="digits"),
        "conf2-again": records(REMEMBERING_WORLD, seeds=5, data="fashion-mnist"),
        "world-digits": records(REMEMBERING_WORLD, seeds=4, data="digits"),  # exploratory: never counted
    }
    folders = {name: "" if name.startswith("world") else "confirmatory-2" for name in made}
    evaluated = {
        name: findings_table.findings_by_dataset(SweepExport(name, cells), folder=folders[name])
        for name, cells in made.items()
    }
    table = findings_table.decided_by(evaluated)
    # conf2-again sorts first in the column, but the registration's order decides which one counts.
    column = {name: table[name]["fashion-mnist/confirmatory-2"] for name in presets[0].primary}
    assert column["sgd_keeps_memory"][0].export == "conf2-again"
    first = {name: next(d for d in decided if d.export == "conf2-fmnist") for name, decided in column.items()}
    batch = table["larger_batch_increases_spread"]["digits/confirmatory-2"]
    counted = [*(d.verdict for d in first.values()), *(d.verdict for d in batch if d.export == "conf2-batch")]
    decided = sum(v in ("reproduced", "contradicted") for v in counted)
    line = findings_table.familywise_second(table, presets)
    # Five registered primary verdicts; conf2-later has not run; conf2-again's headline on Fashion-MNIST
    # is the same claim and dataset as conf2-fmnist's: named, not counted again.
    assert line.startswith("**Family-wise (confirmatory-2):** 3 of the 5 registered primary verdicts have run (")
    assert f"; {decided} decided (reproduced or contradicted)" in line and f"at most {0.06 * decided:.2f} false" in line
    assert "not counted again, a claim and dataset already counted: `sgd_keeps_memory` (`conf2-again`, " in line
    assert "; 1 replication(s) ran;" in line and findings_table.SECOND_COUNTED in line
    empty = findings_table.familywise_second(table, [])
    assert "no presets registered yet" in empty and findings_table.SECOND_COUNTED in empty
    # The registrations' columns are their own: digits and Fashion-MNIST confirmatory-2, titled so.
    markdown = findings_table.table_markdown(table, {name: name for name in made}, line)
    header = next(row for row in markdown.splitlines() if row.startswith("| #"))
    assert "Fashion-MNIST, confirmatory-2: verdict" in header and "digits, confirmatory-2: verdict" in header
    assert line in markdown


def test_a_frozen_reading_is_a_column_beside_the_one_it_stands_by():
    explored = SweepExport("conf-world", records(REMEMBERING_WORLD, seeds=4, data="digits"))
    table = findings_table.decided_by(
        {"conf-world": findings_table.findings_by_dataset(explored, folder="confirmatory")}
    )
    cells = {name: f"**reproduced**: frozen {i}.5 (`conf-world`)" for i, name in enumerate(PAPER_CLAIMS)}
    frozen = findings_table.RegisteredReading(
        "digits/confirmatory", "a" * 40, "b" * 40, cells, "**Family-wise (x):** kept"
    )
    columns = findings_table.datasets_of(table, frozen)
    at = columns.index("digits/confirmatory")
    assert columns[at - 1] == "digits/confirmatory/registered"
    markdown = findings_table.table_markdown(table, {"conf-world": "b"}, frozen.familywise, frozen)
    page = f"{markdown}\n"
    assert column_of(page, "digits, confirmatory (registered rule, aaaaaaa)") == cells
    assert column_of(page, f"digits, confirmatory, {findings_table.TODAY}") != cells
    assert "at commit bbbbbbb" in markdown
    # An edited frozen cell is found, as an edited number is.
    assert findings_table.table_problems(page, table, {"conf-world": "b"}, frozen.familywise, frozen) == []
    edited = page.replace("frozen 3.5", "frozen 3.6")
    assert findings_table.table_problems(edited, table, {"conf-world": "b"}, frozen.familywise, frozen)


def test_the_hand_written_reading_of_the_convergence_rule_quotes_the_table():
    page = (DOCS / "RESULTS.md").read_text()
    section = page.split("## What the convergence rule reads", 1)[1].split("\n## ", 1)[0]
    table = findings_table.page_table(page).replace("−", "-")
    quoted = re.findall(r"[+\-−]\d+\.\d\d", section)
    assert len(quoted) >= 10, quoted
    assert [n for n in quoted if n.replace("−", "-") not in table] == []
    today = familywise_of(page)[1]
    counts = re.search(r"(\d+) of the (\d+) pre-registered verdicts have one", today).groups()
    assert f"counts {counts[0]} of {counts[1]} with a" in section
