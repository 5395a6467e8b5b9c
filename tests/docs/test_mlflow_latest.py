"""benchmarks/mlflow_latest.py's last result stands in docs/RELIABILITY.md, in its own section, with the
command that rebuilds it. (Running the script needs a package index, so the suite does not run it; it
is never imported here: tests and benchmarks import nothing of each other.)"""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "RELIABILITY.md"
BEGIN, END = "<!-- mlflow_latest: begin -->", "<!-- mlflow_latest: end -->"


def test_the_docs_hold_the_section_once_with_a_result():
    text = DOCS.read_text()
    assert text.count(BEGIN) == text.count(END) == 1
    section = text[text.index(BEGIN) : text.index(END)]
    assert "python -m benchmarks.mlflow_latest" in section and "MLflow **" in section
    assert (DOCS.parents[1] / "benchmarks" / "mlflow_latest.py").exists()
