"""docs/PREREGISTRATION.md fixes the margins and thresholds before the confirmatory runs: the code's
constants must equal its table, and its confirmatory seeds must be unused by every export and preset."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from initmem_core.config import RunConfig
from initmem_core.report import inference, regime
from initmem_core.tracking.export import read_export
from initmem_plugins.claims import paper as findings

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "PREREGISTRATION.md"
#: The first seed the pre-registration keeps for confirmatory runs.
CONFIRMATORY_SEEDS_FROM = 1000


def table() -> dict[str, float]:
    text = PAGE.read_text()
    block = text.split("<!-- constants: begin")[1].split("<!-- constants: end -->")[0]
    rows = re.findall(r"^\| `([^`]+)` \| ([0-9.]+) \|", block, flags=re.MULTILINE)
    return {name: float(value) for name, value in rows}


def test_the_codes_margins_and_thresholds_are_the_pre_registered_ones():
    code = {
        "FORGOTTEN_SHARE": findings.FORGOTTEN_SHARE,
        "KEPT_AT_LEAST": findings.KEPT_AT_LEAST,
        "COUPLED_AT_MOST": findings.COUPLED_AT_MOST,
        "CONVERGED_AT_LEAST": findings.CONVERGED_AT_LEAST,
        "LONGER": findings.LONGER,
        "LARGER_LR": findings.LARGER_LR,
        **{f"CLOCK_THRESHOLDS[{clock}]": value for clock, value in regime.CLOCK_THRESHOLDS.items()},
        "EDGE_SHARE": regime.EDGE_SHARE,
        "LEVEL": inference.LEVEL,
        "MIN_SEEDS": inference.MIN_SEEDS,
        "interp_threshold": RunConfig().interp_threshold,
    }
    assert table() == code


def test_every_claim_is_pre_registered():
    text = PAGE.read_text()
    assert all(f"| `{name}`" in text for name in findings.CLAIMS_BY_NAME)


def test_no_export_or_preset_uses_a_confirmatory_seed():
    used = set()
    for path in (ROOT / "docs" / "results").glob("*.json.gz"):
        used |= {record.config.seed for record in read_export(path).records}
    for path in [
        *(ROOT / "plugins" / "claims" / "presets").glob("*.toml"),
        *(ROOT / "docs" / "pilots").glob("*.toml"),
    ]:
        grid = tomllib.loads(path.read_text()).get("grid", {})
        seeds = grid.get("seed", [])
        used |= set(seeds if isinstance(seeds, list) else [seeds])
    assert used and max(used) < CONFIRMATORY_SEEDS_FROM
