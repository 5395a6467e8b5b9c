"""RESULTS.md and the sweeps' pages are regenerated one sweep at a time (benchmarks/results_page.py,
which benchmarks/paper_check.py writes them with): the other sweeps' pages and RESULTS.md's part
written by hand stay as they were, and the page reads table, hand-written part, then the pages."""

from __future__ import annotations

from benchmarks import results_page
from initmem_plugins.claims import findings_table


def test_regenerating_one_sweep_keeps_the_others_and_the_hand_written_part(tmp_path):
    docs = tmp_path
    old = f"# Results\n\nold words\n\n{results_page.OLD_HAND_BELOW}\n## Notes\n\ntyped here\n"
    (docs / "RESULTS.md").write_text(old)
    results_page.rewrite_results(docs, {"a": "# Sweep `a`\n\nold a\n", "b": "# Sweep `b`\n\nold b\n"})
    page = (docs / "RESULTS.md").read_text()
    assert "old words" not in page and results_page.hand_written(page) == "## Notes\n\ntyped here"
    results_page.rewrite_results(docs, {"b": "# Sweep `b`\n\nnew b\n", "c": "# Sweep `c`\n\nnew c\n"})
    again = (docs / "RESULTS.md").read_text()
    assert (docs / "results" / "a.md").read_text() == "# Sweep `a`\n\nold a\n"
    assert (docs / "results" / "b.md").read_text() == "# Sweep `b`\n\nnew b\n"
    index = [line for line in again.splitlines() if line.startswith("- [")]
    assert index == [f"- [Sweep `{n}`](results/{n}.md)" for n in "abc"]
    # The hand-written part comes before the list of pages, and only once.
    assert again.index("typed here") < again.index(results_page.INDEX_BEGIN) and again.count("typed here") == 1
    # Re-reading the page and writing it back changes nothing.
    results_page.rewrite_results(docs, {})
    assert (docs / "RESULTS.md").read_text() == again


def test_the_opening_table_of_findings_comes_first_and_is_kept_when_the_page_is_regenerated(tmp_path):
    table = f"{findings_table.BEGIN}\n| finding | digits |\n|---|---|\n| one | reproduced |\n{findings_table.END}"
    (tmp_path / "RESULTS.md").write_text(f"{results_page.HAND_BEGIN}\ntyped here\n{results_page.HAND_END}\n")
    results_page.rewrite_results(tmp_path, {"a": "# Sweep `a`\n\na\n"}, table)
    page = (tmp_path / "RESULTS.md").read_text()
    assert page.index(table) < page.index("typed here") < page.index("(results/a.md)")
    results_page.rewrite_results(tmp_path, {"a": "# Sweep `a`\n\nnew a\n"})
    again = (tmp_path / "RESULTS.md").read_text()
    assert again.count(table) == 1 and again == page
    assert findings_table.page_table("no table here") == ""


def test_a_sweep_report_moves_one_heading_level_and_fenced_code_stays():
    report = "# Full report\n\ntext # not a heading\n\n## Per sigma\n\n```\n# a comment\n```\n"
    assert results_page.shift_headings(report, 1) == (
        "## Full report\n\ntext # not a heading\n\n### Per sigma\n\n```\n# a comment\n```\n"
    )


def test_a_preset_reads_its_data_from_the_folder_it_is_told(tmp_path):
    plain = findings_table.preset_to_run("paper-fmnist")
    told = findings_table.preset_to_run("paper-fmnist", str(tmp_path))
    assert "data_dir" not in plain.axes and told.axes["data_dir"] == (str(tmp_path),)
    assert told.groups == plain.groups and {k: v for k, v in told.axes.items() if k != "data_dir"} == plain.axes


def test_a_section_from_an_export_says_its_span_and_names_one_day_once():
    from initmem_core.tracking.export import SweepExport

    day = 1_796_300_000_000  # 2026-12-03, in ms as MLflow keeps them
    one_day = findings_table.when_cells_ran(SweepExport("s", [], started_ms=day, ended_ms=day + 600_000))
    assert (
        one_day.startswith("Cells ran over 10.0 minutes from the first cell's start")
        and "gaps between launches" in one_day
    )
    assert one_day.endswith("included), 2026-12-03, as the tracking store recorded them")
    two_days = findings_table.when_cells_ran(SweepExport("s", [], started_ms=day, ended_ms=day + 86_400_000))
    assert ", 2026-12-03 to 2026-12-04," in two_days
    assert findings_table.when_cells_ran(SweepExport("s", [])) == "Cells ran, as the tracking store recorded them"
