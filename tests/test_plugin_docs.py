"""docs/plugins.md stays true: every hook documented with its exact signature, the generated
reference current, and the tutorial's files identical to what `initmem new-plugin` writes."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from initmem_core.plugin_system.loader import load_registry
from initmem_plugins.commands.scaffold import create_plugin

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
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
