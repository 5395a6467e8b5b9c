"""Every figure in the docs is rebuilt by a script named beside it: each benchmark a page names
(``benchmarks/NAME.py`` or ``python -m benchmarks.NAME``) is in the tree, or the page says, in a
paragraph that names it, that it was retired and at which commit it can still be found
(``git show COMMIT:benchmarks/NAME.py``)."""

from __future__ import annotations

import re
import subprocess

from tests.support import ROOT

#: ``benchmarks/NAME.py`` or ``benchmarks.NAME`` (``tests/benchmarks/``, the tests of a few, is none).
NAMED = re.compile(r"(?<![\w/])benchmarks[/.]([a-z_]+(?:[/.][a-z_]+)*?)(?:\.py\b|\b)")
COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")


def exists(name: str) -> bool:
    path = ROOT / "benchmarks" / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def held_at(commit: str, name: str) -> bool:
    path = f"{commit}:benchmarks/{name.replace('.', '/')}.py"
    return subprocess.run(["git", "cat-file", "-e", path], cwd=ROOT, capture_output=True).returncode == 0


def test_every_benchmark_a_page_names_exists_or_is_named_with_the_commit_that_holds_it():
    missing = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        named, retired = set(), set()
        for paragraph in page.read_text().split("\n\n"):
            here = {m.group(1) for m in NAMED.finditer(paragraph)} - {"NAME"}
            named |= here
            if "retired" in paragraph:
                commits = set(COMMIT.findall(paragraph))
                retired |= {name for name in here if any(held_at(c, name) for c in commits)}
        missing += [f"{page.name}: benchmarks/{name}" for name in sorted(named - retired) if not exists(name)]
    assert not missing, missing


def test_every_benchmark_script_is_named_by_a_page():
    """benchmarks/ holds the scripts behind the docs' figures (and the helpers they share): each one
    that runs as a command is named by a page that shows what it measured."""
    pages = "\n".join(page.read_text() for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    named = {m.group(1) for m in NAMED.finditer(pages)}
    scripts = [
        path.stem
        for path in sorted((ROOT / "benchmarks").glob("*.py"))
        if 'if __name__ == "__main__"' in path.read_text()
    ]
    assert "paper_check" in scripts and not (ROOT / "benchmarks" / "chaos.py").exists()
    assert [name for name in scripts if name not in named] == []
