"""A report as files in one folder: the table as CSV and Markdown, the half-lives as
``forgetting.csv`` (when the records carried their histories), and every plot as PNG."""

from __future__ import annotations

from pathlib import Path

from initmem_core.report.memory import Report
from initmem_core.report.plots import write_plots
from initmem_core.report.render import forgetting_csv, to_csv, to_markdown


def write_report_files(report: Report, folder: str | Path, title: str = "Initialization memory") -> list[Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tables = {folder / "report.csv": to_csv(report), folder / "report.md": to_markdown(report, title)}
    if report.forgetting:
        tables[folder / "forgetting.csv"] = forgetting_csv(report.forgetting)
    for path, text in tables.items():
        path.write_text(text, encoding="utf-8")
    return [*tables, *write_plots(report, folder)]
