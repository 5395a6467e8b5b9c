"""docs/plugins.md stays true: every hook documented with its exact signature, the generated
reference current, and the tutorial's files identical to what `initmem new-plugin` writes."""

from __future__ import annotations

import ast
import importlib.util
import re

import pytest

from initmem_core.plugin_system.loader import load_registry
from initmem_plugins.commands.scaffold import SCAFFOLD_KINDS, create_plugin
from tests.support import ROOT

DOC = ROOT / "docs" / "plugins.md"
# The generator is a tool of the docs (docs/hook_reference.py), not part of the installed package.
_spec = importlib.util.spec_from_file_location("hook_reference", DOC.with_name("hook_reference.py"))
assert _spec is not None and _spec.loader is not None
hook_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook_reference)
REGENERATE = "regenerate it with `python docs/hook_reference.py --update docs/plugins.md`"
TUTORIAL_FILE = re.compile(r"<!-- file: (?P<path>\S+) -->\n```\w*\n(?P<text>.*?)```", re.DOTALL)


@pytest.fixture(scope="module")
def document() -> str:
    return DOC.read_text()


def test_every_hook_is_documented_with_its_signature(document):
    for name in hook_reference.hook_specs():
        heading = f"### `{hook_reference.signature(name)}`"
        assert heading in document, f"{name} is missing from docs/plugins.md or its signature differs; {REGENERATE}"


def test_generated_reference_matches_the_hook_specs(document):
    section = hook_reference.generated_section(document)
    assert section is not None, "docs/plugins.md lost its hook-reference markers"
    assert section == hook_reference.reference(), f"the hook reference in docs/plugins.md is stale; {REGENERATE}"


def test_update_rewrites_only_the_generated_section(tmp_path, document):
    stale = tmp_path / "plugins.md"
    section = hook_reference.generated_section(document)
    stale.write_text(document.replace(section, "### `initmem_register_things(old)`\n"))
    hook_reference.main(["--update", str(stale)])
    assert stale.read_text() == document


def test_tutorial_files_are_what_new_plugin_writes(tmp_path, document):
    folder, _ = create_plugin("optimizer", "sign-sgd", tmp_path / "pkg", load_registry(entry_points=False))
    shown = {m["path"]: m["text"] for m in TUTORIAL_FILE.finditer(document)}
    assert {"pyproject.toml", "src/initmem_sign_sgd/plugin.py", "src/initmem_sign_sgd/optimizer.py"} <= set(shown)
    for path, text in shown.items():
        assert text == (folder / path).read_text(), (
            f"docs/plugins.md shows {path} differently from `initmem new-plugin`"
        )


def test_the_claim_api_is_in_the_reference_name_by_name(document):
    for module in hook_reference.CLAIM_MODULES:
        assert f"### `{module.__name__}`" in document, f"{module.__name__} is missing; {REGENERATE}"
        for name in hook_reference.public_names(module):
            assert f"#### `{name}" in document or f"| `{name}` |" in document, f"{module.__name__}.{name}; {REGENERATE}"
    assert "per_stratum" in hook_reference.public_names(hook_reference.claim_api)
    assert hook_reference.public_names(hook_reference.baseline)[-2:] == ["baseline_sgd", "low_rate_needs"]


def stable_modules(document: str) -> set[str]:
    """The modules docs/plugins.md names on the stable surface (a class named there: its module)."""
    surface = document.split("**The stable surface**", 1)[1].split("Everything else is internal", 1)[0]
    named = set(re.findall(r"`(initmem_(?:core|plugins)[\w.]*)", surface))
    return named | {name.rpartition(".")[0] for name in named if name.rpartition(".")[2][:1].isupper()}


@pytest.mark.parametrize("kind", SCAFFOLD_KINDS)
def test_what_new_plugin_writes_imports_initmem_only_from_the_stable_surface(kind, tmp_path, document):
    stable = stable_modules(document)
    assert {"initmem_core", "initmem_core.report.claim_api", "initmem_plugins.claims.baseline"} <= stable
    folder, _ = create_plugin(kind, "my-thing", tmp_path / "pkg", load_registry(entry_points=False))
    imported = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    initmem = {name for name in imported if name.split(".")[0] in ("initmem_core", "initmem_plugins", "initmem_cli")}
    assert initmem and initmem <= stable, f"{kind}: {sorted(initmem - stable)} are not on the stable surface"
