"""benchmarks/mlflow_latest.py's last result stands in docs/RELIABILITY.md, in its own section, with the
command that rebuilds it, and the test files it runs are where it names them. (Running the script needs a
package index, so the suite does not run it; it is never imported here, only read: tests and benchmarks
import nothing of each other.)"""

from __future__ import annotations

import ast

from tests.support import ROOT

DOCS = ROOT / "docs" / "RELIABILITY.md"
BEGIN, END = "<!-- mlflow_latest: begin -->", "<!-- mlflow_latest: end -->"


def test_the_docs_hold_the_section_once_with_a_result():
    text = DOCS.read_text()
    assert text.count(BEGIN) == text.count(END) == 1
    section = text[text.index(BEGIN) : text.index(END)]
    assert "python -m benchmarks.mlflow_latest" in section and "MLflow **" in section
    assert (DOCS.parents[1] / "benchmarks" / "mlflow_latest.py").exists()


def test_the_test_files_it_runs_exist():
    script = ROOT / "benchmarks" / "mlflow_latest.py"
    assigned = {
        target.id: node.value
        for node in ast.parse(script.read_text()).body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    files = ast.literal_eval(assigned["MLFLOW_TESTS"])
    assert "core/tracking/test_store_creation.py" in files
    assert [name for name in files if not (ROOT / "tests" / name).is_file()] == []
