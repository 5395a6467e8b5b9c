"""docs/PREREGISTRATION.md fixes the margins and thresholds before the confirmatory runs: the code's
constants must equal its table, and its confirmatory seeds must be unused by every export and preset."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from initmem_core.config import RunConfig
from initmem_core.report import inference, regime
from initmem_core.tracking.export import read_export
from initmem_core.tracking.records import FINISHED, fit_counts
from initmem_plugins.claims import declared
from tests.support import ROOT

PAGE = ROOT / "docs" / "PREREGISTRATION.md"
#: The first seed the pre-registration keeps for confirmatory runs.
CONFIRMATORY_SEEDS_FROM = 1000
PRESETS = ROOT / "plugins" / "claims" / "presets"


def table(registration: str = "") -> dict[str, float]:
    """The constants table of the first registration, or of the dated one ``registration``."""
    text = PAGE.read_text()
    marker = f"constants {registration}".strip()
    block = text.split(f"<!-- {marker}: begin")[1].split(f"<!-- {marker}: end -->")[0]
    rows = re.findall(r"^\| `([^`]+)` \| ([0-9.]+) \|", block, flags=re.MULTILINE)
    return {name: float(value) for name, value in rows}


def code_constants() -> dict[str, float]:
    """The margins and thresholds the code holds, as the first registration's table names them."""
    return {
        "FORGOTTEN_SHARE": declared.FORGOTTEN_SHARE,
        "KEPT_AT_LEAST": declared.KEPT_AT_LEAST,
        "COUPLED_AT_MOST": declared.COUPLED_AT_MOST,
        "CONVERGED_AT_LEAST": declared.CONVERGED_AT_LEAST,
        "LONGER": declared.LONGER,
        "LARGER_LR": declared.LARGER_LR,
        **{f"CLOCK_THRESHOLDS[{clock}]": value for clock, value in regime.CLOCK_THRESHOLDS.items()},
        "EDGE_SHARE": regime.EDGE_SHARE,
        "LEVEL": inference.LEVEL,
        "MIN_SEEDS": inference.MIN_SEEDS,
        "interp_threshold": RunConfig().interp_threshold,
    }


def test_the_codes_margins_and_thresholds_are_the_pre_registered_ones():
    assert table() == code_constants()


def test_the_second_registrations_constants_are_the_codes():
    added = {"LOW_RATE_SHARE": declared.LOW_RATE_SHARE, "EQUAL_STEPS": declared.EQUAL_STEPS}
    assert table("2026-12-07") == {**code_constants(), **added, "EDGE_FRACTION": regime.EDGE_FRACTION}


def test_every_claim_is_pre_registered():
    text = PAGE.read_text()
    assert all(f"| `{name}`" in text for name in declared.STATEMENTS)


def confirmatory_presets() -> dict[str, tuple[set[int], list[str]]]:
    """The pre-registered presets: name -> (seeds, primary claims), from the page's table."""
    text = PAGE.read_text()
    block = text.split("<!-- confirmatory presets: begin")[1].split("<!-- confirmatory presets: end -->")[0]
    presets = {}
    for name, first, last, primary in re.findall(r"^\| `([^`]+)` \| (\d+)-(\d+) \| [^|]* \| ([^|]*) \|", block, re.M):
        presets[name] = (set(range(int(first), int(last) + 1)), re.findall(r"`([^`]+)`", primary))
    return presets


def preset_seeds(path: Path) -> set[int]:
    seeds = tomllib.loads(path.read_text()).get("grid", {}).get("seed", [])
    return set(seeds if isinstance(seeds, list) else [seeds])


def test_no_exploratory_export_pilot_or_preset_uses_a_confirmatory_seed():
    confirmatory = {**confirmatory_presets(), **{p.preset: () for p in second_presets()}}
    used = set()
    for path in (ROOT / "docs" / "results").glob("*.json.gz"):  # exploratory: confirmatory/ is below
        used |= {record.config.seed for record in read_export(path).records}
    for path in [*PRESETS.glob("*.toml"), *(ROOT / "docs" / "pilots").glob("*.toml")]:
        if path.stem not in confirmatory:
            used |= preset_seeds(path)
    assert used and max(used) < CONFIRMATORY_SEEDS_FROM


def test_the_confirmatory_presets_are_the_pre_registered_ones_on_disjoint_fresh_seeds():
    confirmatory = confirmatory_presets()
    assert len(confirmatory) >= 4
    seen: set[int] = set()
    for name, (seeds, primary) in confirmatory.items():
        assert preset_seeds(PRESETS / f"{name}.toml") == seeds and min(seeds) >= CONFIRMATORY_SEEDS_FROM
        assert not seeds & seen, name  # no two confirmatory presets share a seed
        seen |= seeds
        assert primary and set(primary) <= set(declared.STATEMENTS), name


def _git(*args: str) -> str | None:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else None


#: Where the first registration ends on the page: the dated registrations that follow it are its own.
LATER_REGISTRATIONS = "\n---\n\n# Second registration"


def first_registration() -> str:
    """The page as the first registration froze it: everything before the later registrations."""
    return PAGE.read_text().split(LATER_REGISTRATIONS)[0]


def test_every_confirmatory_export_ran_from_the_commit_that_froze_this_page():
    """Its commit holds this page and its preset as they are now, and is in this history."""
    exports = sorted((ROOT / "docs" / "results" / "confirmatory").glob("*.json.gz"))
    if _git("rev-parse", "HEAD") is None:
        pytest.skip("not a git checkout: the commits cannot be read")
    confirmatory = confirmatory_presets()
    for path in exports:
        export = read_export(path)
        assert export.name in confirmatory, path
        commit = export.parent_tags["mlflow.source.git.commit"]
        if (
            _git("cat-file", "-e", f"{commit}^{{commit}}") is None
            and _git("rev-parse", "--is-shallow-repository") == "true\n"
        ):
            pytest.skip(f"a shallow clone: {commit[:7]}, which froze the page, is not in it")
        assert _git("merge-base", "--is-ancestor", commit, "HEAD") is not None, (path, commit)
        assert _git("show", f"{commit}:docs/PREREGISTRATION.md") == first_registration(), (path, commit)
        # the preset it ran, where that commit kept presets (the core's folder before they became a plugin's)
        kept = [f"{folder}/{export.name}.toml" for folder in ("initmem_core/sweep/presets", "plugins/claims/presets")]
        assert any(_git("show", f"{commit}:{preset}") is not None for preset in kept), (path, kept)
        assert {record.config.seed for record in export.records} == confirmatory[export.name][0]


def test_every_confirmatory_export_is_complete_and_in_the_regime():
    """Every pre-registered preset exported, each cell trained, and at least 95% of the trained
    cells fit their training set (PREREGISTRATION.md: the regime the verdicts need)."""
    read = [read_export(path) for path in (ROOT / "docs" / "results" / "confirmatory").glob("*.json.gz")]
    exports = {export.name: export for export in read}
    assert set(exports) == set(confirmatory_presets())
    for name, export in exports.items():
        assert all(record.status == FINISHED for record in export.records), name
        fit, ran = fit_counts(export.records)
        assert ran == len(export.records) and fit >= 0.95 * ran, (name, fit, ran)


# -- The second registration (its dated section of the page) -----------------------------------

SECOND_EXPORTS = ROOT / "docs" / "results" / "confirmatory-2"


def second_presets():
    from initmem_plugins.claims.findings_table import second_registration

    return second_registration(PAGE)


def seed_range(text: str) -> set[int]:
    first, _, last = text.partition("-")
    return set(range(int(first), int(last or first) + 1))


def every_other_seed_and_data_seed() -> tuple[set[int], set[int]]:
    """The seeds and data seeds of every export, pilot and preset but the second registration's."""
    second = {p.preset for p in second_presets()}
    seeds, data_seeds = set(), set()
    exports = [*(ROOT / "docs" / "results").rglob("*.json.gz"), *(ROOT / "docs" / "pilots").glob("*.json.gz")]
    for path in exports:
        if path.parent != SECOND_EXPORTS:
            records = read_export(path).records
            seeds |= {r.config.seed for r in records}
            data_seeds |= {r.config.data_seed for r in records}
    for path in [*PRESETS.glob("*.toml"), *(ROOT / "docs" / "pilots").glob("*.toml")]:
        if path.stem not in second:
            seeds |= preset_seeds(path)
            data_seeds.add(tomllib.loads(path.read_text()).get("base", {}).get("data_seed", 0))
    return seeds, data_seeds


def test_the_second_registrations_seeds_and_split_are_fresh_and_its_presets_match_the_table():
    presets = second_presets()
    assert presets, "the second registration has no presets table"
    used, used_splits = every_other_seed_and_data_seed()
    seen: set[int] = set()
    for preset in presets:
        grid = tomllib.loads((PRESETS / f"{preset.preset}.toml").read_text())
        seeds = seed_range(preset.seeds)
        assert preset_seeds(PRESETS / f"{preset.preset}.toml") == seeds, preset.preset
        assert not seeds & used and not seeds & seen, preset.preset  # disjoint from everything before it
        seen |= seeds
        data_seed = grid["base"]["data_seed"]
        assert str(data_seed) == preset.data_seed and data_seed not in used_splits, preset.preset
        assert grid["base"]["patience"] > 0, preset.preset  # every run trains to convergence


def second_registration_text(text: str) -> str:
    return text.split(LATER_REGISTRATIONS, 1)[1]


def test_every_second_registration_export_ran_from_the_commit_that_froze_it_and_converged():
    """Each export under docs/results/confirmatory-2/ ran from a commit holding the second registration
    as it is now, on its preset's seeds and split; at least 90% of its trained runs fit and stopped
    before their cap."""
    exports = sorted(SECOND_EXPORTS.glob("*.json.gz"))
    if not exports:
        pytest.skip("no export of the second registration yet")
    if _git("rev-parse", "HEAD") is None:
        pytest.skip("not a git checkout: the commits cannot be read")
    presets = {p.preset: p for p in second_presets()}
    for path in exports:
        export = read_export(path)
        preset = presets[export.name]
        commit = export.parent_tags["mlflow.source.git.commit"]
        if _git("cat-file", "-e", f"{commit}^{{commit}}") is None:
            pytest.skip(f"a shallow clone: {commit[:7]}, which froze the page, is not in it")
        assert _git("merge-base", "--is-ancestor", commit, "HEAD") is not None, (path, commit)
        frozen = _git("show", f"{commit}:docs/PREREGISTRATION.md")
        assert frozen is not None and second_registration_text(frozen) == second_registration_text(PAGE.read_text())
        assert {r.config.seed for r in export.records} == seed_range(preset.seeds)
        assert {str(r.config.data_seed) for r in export.records} == {preset.data_seed}
        trained = [r for r in export.records if r.trained]
        fit = sum(r.fit for r in trained)
        converged = sum(r.stop_reason == "patience" for r in trained)
        assert fit >= 0.9 * len(trained) and converged >= 0.9 * len(trained), (path, fit, converged, len(trained))
