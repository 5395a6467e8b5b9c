"""Every relative link in README.md and docs/ resolves to a file of the repository, and no page or
generator cites a copy of the paper's account that lives outside it (docs/PAPER.md is the one)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import ROOT

#: ``[text](target)`` and ``![alt](target)``, an optional title after the target.
INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: ``[label]: target`` reference definitions.
REFERENCE = re.compile(r"(?m)^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
FENCE = re.compile(r"(?ms)^\s*(```|~~~).*?^\s*\1")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def relative_links(text: str) -> list[str]:
    """The link targets of a Markdown page that point at files (no URL, no in-page anchor),
    fenced code and inline code left out."""
    text = FENCE.sub("", text)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = [m.group(1) for pattern in (INLINE, REFERENCE) for m in pattern.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t) and not t.startswith("#")]


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for target in relative_links(page.read_text()):
        path = (page.parent / target.split("#", 1)[0]).resolve()
        where = f"{page.relative_to(root)}: ({target})"
        if not path.is_relative_to(root):
            problems.append(f"{where} leads outside the repository")
        elif not path.exists():
            problems.append(f"{where} does not exist")
    return problems


def test_every_relative_link_in_the_docs_resolves_inside_the_repository():
    problems = [problem for page in pages() for problem in broken_links(page)]
    assert problems == []


def test_the_link_check_finds_a_missing_file_and_a_path_outside(tmp_path):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "RESULTS.md").write_text("")
    (root / "README.md").write_text("")
    (tmp_path / "outside.png").write_text("")
    text = (
        "[fine](RESULTS.md) [anchor](#x) [web](https://example.org) `[code](nowhere.md)`\n"
        "[gone](nowhere.md) ![out](../../outside.png)\n[ref]: ../README.md\n```\n[fenced](nowhere.md)\n```\n"
    )
    assert relative_links(text) == ["RESULTS.md", "nowhere.md", "../../outside.png", "../README.md"]
    page = root / "docs" / "page.md"
    page.write_text(text)
    assert broken_links(page, root) == [
        "docs/page.md: (nowhere.md) does not exist",
        "docs/page.md: (../../outside.png) leads outside the repository",
    ]


def test_no_page_or_generator_cites_the_paper_outside_the_repository():
    sources = [*pages(), *(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]
    citing = [str(p.relative_to(ROOT)) for p in sources if "shared/PAPER.md" in p.read_text()]
    assert citing == []
