"""tests/ is laid out as docs/ARCHITECTURE.md says: like the code (a folder per package, named for
it), no test file directly in tests/, the shared helpers in tests/support/ and each of them used,
every test file the repository names where it says, and no docstring citing the project's tracker."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

TESTS = ROOT / "tests"
#: The folders of tests/ not named for a folder of the repository: each is named here for what it holds.
NAMED_FOR_WHAT_THEY_HOLD = {
    "core": "initmem_core",
    "e2e": "whole initmem processes across packages",
    "support": "the shared helpers",
}
#: Test file paths the repository names that are not this checkout's: a plugin package's own.
NOT_OURS = {"tests/test_initmem_sign_sgd.py": "docs/plugins.md: what `initmem new-plugin` writes"}
#: Pages frozen at a commit, held equal to it by their own tests: the paths they name are that commit's.
FROZEN = {"docs/PREREGISTRATION.md": "tests/docs/test_preregistration.py"}
TEST_PATH = re.compile(r"(?<![\w/.-])tests/[\w/]+\.py\b")
#: A commit (seven or more hex digits, one a digit at least): a path beside one is that commit's.
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
#: "issue 13", "issues 36-40", "#29"; another project's (``pytorch issue 166387``) is a citation.
ISSUE = re.compile(r"(?<!pytorch )\bissues? \d+|(?<![\w&/])#\d+\b", re.IGNORECASE)


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_test_file_sits_directly_in_tests():
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert loose == [], (
        f"put these in the folder of the package they test (tests/core/..., tests/plugins/<kind>/...): {loose}"
    )


def test_every_folder_is_a_package_named_for_the_code_it_tests():
    """Each folder of tests/ has an ``__init__.py`` (its modules import as ``tests.<folder>...``,
    so two files of one name in two folders stay apart), and is named for what it tests: a folder of
    the repository (cli, plugins, docs...), a subpackage of ``initmem_core`` under core/, a plugin
    kind under plugins/."""
    folders = sorted({p.parent for p in python_files(TESTS)} - {TESTS})
    assert folders, "no folder in tests/"
    problems = [f"{f.relative_to(ROOT)} has no __init__.py" for f in folders if not (f / "__init__.py").is_file()]
    code = {"core": ROOT / "initmem_core", "plugins": ROOT / "plugins"}
    for folder in folders:
        parts = folder.relative_to(TESTS).parts
        if len(parts) == 1:
            named = parts[0] in NAMED_FOR_WHAT_THEY_HOLD or (ROOT / parts[0]).is_dir()
        else:
            named = parts[0] in code and (code[parts[0]].joinpath(*parts[1:]) / "__init__.py").is_file()
        if not named:
            problems.append(f"{folder.relative_to(ROOT)} is named for no package of the repository")
    assert problems == []


def _imported(path: Path) -> set[str]:
    """The ``tests.support`` modules a file imports (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "tests.support":
            found |= {f"tests.support.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.support."):
            found.add(node.module or "")
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("tests.support.")}
    return found


def test_every_helper_in_support_is_used_by_a_test():
    support = TESTS / "support"
    helpers = {f"tests.support.{p.stem}" for p in support.glob("*.py") if p.name != "__init__.py"}
    assert "tests.support.cli_processes" in helpers
    used = set().union(*(_imported(p) for p in python_files(TESTS) if support not in p.parents))
    assert sorted(helpers - used) == []


def test_the_helper_check_reads_every_form_of_import(tmp_path):
    source = tmp_path / "test_x.py"
    source.write_text(
        "from tests.support import ROOT, builders\nimport tests.support.fresh_imports\n"
        "def test_y():\n    from tests.support.long_commands import run_command\n"
    )
    assert _imported(source) == {
        "tests.support.ROOT",
        "tests.support.builders",
        "tests.support.fresh_imports",
        "tests.support.long_commands",
    }


def named_test_paths(text: str) -> list[str]:
    """The ``tests/...py`` paths a text names, but those on (or just after) a line naming a commit."""
    lines = text.splitlines()
    return [
        path
        for number, line in enumerate(lines)
        for path in TEST_PATH.findall(line)
        if not COMMIT.search(line) and not (number and COMMIT.search(lines[number - 1]))
    ]


def test_the_path_reader_skips_a_commits_files():
    text = (
        "checked by `tests/core/test_x.py` (and tests/e2e/test_y.py)\nat bf423f4:\ntests/test_old.py, not a/tests/z.py"
    )
    assert named_test_paths(text) == ["tests/core/test_x.py", "tests/e2e/test_y.py"]


def test_every_test_file_the_repository_names_exists():
    """README.md, docs/ and the sources outside tests/ name test files by path (what checks a
    claim, what a command runs): each is where they say, but those of a past commit or a frozen page."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    texts = [
        ROOT / name
        for name in listed.stdout.split()
        if (name.endswith((".md", ".py", ".toml")) or name.startswith(".ci/"))
        and not name.startswith("tests/")
        and name not in FROZEN
        and (ROOT / name).is_file()
    ]
    assert all((ROOT / test).is_file() for test in FROZEN.values())
    missing = sorted(
        f"{page.relative_to(ROOT)}: {path}"
        for page in texts
        for path in named_test_paths(page.read_text())
        if not (ROOT / path).is_file() and path not in NOT_OURS
    )
    assert missing == []


def test_no_docstring_in_the_tests_cites_an_issue():
    """A test says what it checks; the tracker's numbers mean nothing to a reader of the code."""
    citing = []
    for path in python_files(TESTS):
        tree = ast.parse(path.read_text())
        nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef))]
        for node in nodes:
            doc = ast.get_docstring(node) or ""
            citing += [f"{path.relative_to(ROOT)}: {found}" for found in ISSUE.findall(doc)]
    assert citing == []
    assert ISSUE.findall("issue 13, issues 36-40, #29, pytorch issue 166387, #fff") == ["issue 13", "issues 36", "#29"]
