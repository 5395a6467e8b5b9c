"""A report as files in one folder: the table as CSV and Markdown, the half-lives as
``forgetting.csv`` (when the records carried their histories), and every registered figure
(``report/figures.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from initmem_core.plugin_system.registry import Registry
from initmem_core.report.figures import draw_figures
from initmem_core.report.memory import Report
from initmem_core.report.render import forgetting_csv, to_csv, to_markdown
from initmem_core.tracking.records import CellRecord


def write_report_files(
    report: Report,
    folder: str | Path,
    title: str = "Initialization memory",
    registry: Registry | None = None,
    records: Sequence[CellRecord] = (),
) -> list[Path]:
    """The report's tables and every registered figure into ``folder`` (figures that draw the cells
    themselves read ``records``, those the report was built from); returns the paths written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tables = {folder / "report.csv": to_csv(report), folder / "report.md": to_markdown(report, title)}
    if report.forgetting:
        tables[folder / "forgetting.csv"] = forgetting_csv(report.forgetting)
    for path, text in tables.items():
        path.write_text(text, encoding="utf-8")
    return [*tables, *draw_figures(report, folder, registry, records)]
