"""RESULTS.md is regenerated one sweep at a time (plugins/claims/findings_table.py, which
benchmarks/paper_check.py writes it with): the other sweeps' sections and the part written by hand
stay as they were."""

from __future__ import annotations


def paper_check():
    from initmem_plugins.claims import findings_table

    return findings_table


def test_regenerating_one_sweep_keeps_the_others_and_the_hand_written_part():
    check = paper_check()
    page = check.results_markdown(
        ["## Sweep `a` (preset `a`)\n\nold a\n", "## Sweep `b`\n\nold b\n"], "## Notes\n\nby hand\n"
    )
    generated, marker, kept = page.partition(check.KEPT_BELOW)
    sections = check.merge_sections(generated, ["## Sweep `b`\n\nnew b\n", "## Sweep `c`\n\nnew c\n"])
    again = check.results_markdown(sections, kept.lstrip("\n"))
    assert marker and again.index("old a") < again.index("new b") < again.index("new c") < again.index(marker)
    assert "old b" not in again and again.endswith("## Notes\n\nby hand\n")
    # Re-reading a page and writing it back changes nothing.
    generated, _, kept = again.partition(check.KEPT_BELOW)
    assert check.results_markdown(check.merge_sections(generated, []), kept.lstrip("\n")) == again


def test_the_opening_table_of_findings_is_kept_when_the_page_is_regenerated():
    check = paper_check()
    table = f"{check.BEGIN}\n| finding | digits |\n|---|---|\n| one | reproduced |\n{check.END}"
    page = check.results_markdown(["## Sweep `a`\n\nold a\n"], "by hand\n", table)
    assert page.index(table) < page.index("One section per sweep") < page.index("old a")
    generated, _, kept = page.partition(check.KEPT_BELOW)
    assert check.opening_table(generated) == table
    again = check.results_markdown(
        check.merge_sections(generated, ["## Sweep `a`\n\nnew a\n"]), kept.lstrip("\n"), check.opening_table(generated)
    )
    assert again.count(table) == 1 and "new a" in again and "old a" not in again
    assert check.opening_table("no table here") == ""


def test_a_preset_reads_its_data_from_the_folder_it_is_told(tmp_path):
    check = paper_check()
    plain = check.preset_to_run("paper-fmnist")
    told = check.preset_to_run("paper-fmnist", str(tmp_path))
    assert "data_dir" not in plain.axes and told.axes["data_dir"] == (str(tmp_path),)
    assert told.groups == plain.groups and {k: v for k, v in told.axes.items() if k != "data_dir"} == plain.axes


def test_a_section_from_an_export_says_its_span_and_names_one_day_once():
    from initmem_core.tracking.export import SweepExport

    day = 1_796_300_000_000  # 2026-12-03, in ms as MLflow keeps them
    one_day = paper_check().when_cells_ran(SweepExport("s", [], started_ms=day, ended_ms=day + 600_000))
    assert (
        one_day.startswith("Cells ran over 10.0 minutes from the first cell's start")
        and "gaps between launches" in one_day
    )
    assert one_day.endswith("included), 2026-12-03, as the tracking store recorded them")
    two_days = paper_check().when_cells_ran(SweepExport("s", [], started_ms=day, ended_ms=day + 86_400_000))
    assert ", 2026-12-03 to 2026-12-04," in two_days
    assert paper_check().when_cells_ran(SweepExport("s", [])) == "Cells ran, as the tracking store recorded them"
