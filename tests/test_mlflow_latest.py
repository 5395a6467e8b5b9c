"""benchmarks/mlflow_latest.py's plumbing: its result replaces its own section of the docs and
nothing else, and pytest's last line is what it reports. (Running it needs a package index: see
docs/RELIABILITY.md, "Against the newest MLflow", for its last result.)"""

from __future__ import annotations

from benchmarks import mlflow_latest


def test_the_result_replaces_its_section_between_the_markers_and_nowhere_else(tmp_path):
    page = tmp_path / "RELIABILITY.md"
    page.write_text(f"# Reliability\n\nbefore\n\n{mlflow_latest.BEGIN}\nold result\n{mlflow_latest.END}\n\nafter\n")
    mlflow_latest.write_section(page, "new result")
    first = page.read_text()
    assert first == f"# Reliability\n\nbefore\n\n{mlflow_latest.BEGIN}\nnew result\n{mlflow_latest.END}\n\nafter\n"
    mlflow_latest.write_section(page, "new result")
    assert page.read_text() == first

    bare = tmp_path / "other.md"
    bare.write_text("# Other\n")
    mlflow_latest.write_section(bare, "a result")
    section = f"## Against the newest MLflow\n\n{mlflow_latest.BEGIN}\na result\n{mlflow_latest.END}\n"
    assert bare.read_text().endswith(section)


def test_the_summary_is_pytests_last_line():
    output = "....F.\n=== FAILURES ===\nFAILED tests/test_x.py::test_y - boom\n==== 1 failed, 5 passed in 3.20s ====\n"
    assert mlflow_latest.summary_line(output) == "1 failed, 5 passed in 3.20s"
    assert mlflow_latest.summary_line("") == "(no output)"


def test_the_docs_hold_the_section_once_with_a_result():
    text = mlflow_latest.DOCS.read_text()
    assert text.count(mlflow_latest.BEGIN) == text.count(mlflow_latest.END) == 1
    section = text[text.index(mlflow_latest.BEGIN) : text.index(mlflow_latest.END)]
    assert "python -m benchmarks.mlflow_latest" in section and "MLflow **" in section


def test_a_child_package_the_index_lacks_is_named_with_the_version_kept():
    checked = (
        "mlflow 3.18.0 has requirement mlflow-tracing==3.18.0, but you have mlflow-tracing 3.17.2.\n"
        "mlflow-skinny 3.18.0 requires python-multipart, which is not installed.\n"
        "torch 2.14.1 has requirement sympy==1.13, but you have sympy 1.14.\n"
    )
    kept = "mlflow-tracing 3.17.2 kept (the index lacks mlflow-tracing==3.18.0)"
    assert mlflow_latest.children_behind(checked) == kept
    assert mlflow_latest.children_behind("No broken requirements found.\n") == ""
