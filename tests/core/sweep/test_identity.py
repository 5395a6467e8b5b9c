"""A sweep's name is bound to its grid: the same grid resumes, another is refused in one line
with nothing written, ``--extend`` adds cells; a preset with overrides is named for them."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.config import RunConfig
from initmem_core.sweep.grid import spec_from_values
from initmem_core.sweep.identity import GridIdentity
from initmem_core.sweep.presets import preset_spec
from initmem_core.vocabulary import GRID_TAG
from tests.support.cli_processes import children, stored_runs

runner = CliRunner(env={"COLUMNS": "200"})
TINY = [
    "--data",
    "digits",
    "--arch",
    "resnet20",
    "--train-size",
    "64",
    "--batch-size",
    "32",
    "--eval-size",
    "100",
    "--eval-batch-size",
    "512",
    "--threads",
    "1",
    "--sigma",
    "0.5,2",
    "--name",
    "mix",
]


def cells(**values) -> list[RunConfig]:
    return [RunConfig(sigma=sigma, **values) for sigma in (0.5, 2.0)]


def test_the_same_cells_in_another_order_are_the_same_grid():
    assert GridIdentity.of(cells(epochs=2)).digest == GridIdentity.of(cells(epochs=2)[::-1]).digest
    assert GridIdentity.of(cells(epochs=2)).digest != GridIdentity.of(cells(epochs=3)).digest


def test_another_grid_is_refused_naming_what_differs():
    first, other = GridIdentity.of(cells(epochs=2)), GridIdentity.of(cells(epochs=3))
    tags = {GRID_TAG: first.digest}
    first.admit("mix", tags, first.values, extend=False)  # a resume
    with pytest.raises(Exception) as refused:
        other.admit("mix", tags, first.values, extend=False)
    message = str(refused.value)
    assert "\n" not in message
    assert "epochs 2 (this launch: 3)" in message and "--name OTHER" in message and "--extend" in message
    other.admit("mix", tags, first.values, extend=True)  # on purpose
    assert other.tag_value(tags) == f"{first.digest},{other.digest}"


def test_a_sweep_from_before_identities_is_matched_by_its_params():
    first = GridIdentity.of(cells(epochs=2))
    first.admit("old", {}, first.values, extend=False)
    with pytest.raises(Exception, match="epochs 2"):
        GridIdentity.of(cells(epochs=3)).admit("old", {}, first.values, extend=False)


def test_a_preset_with_overrides_is_named_for_them():
    preset = preset_spec("paper-mini")
    assert preset.override(spec_from_values({"epochs": "3"})).name == "paper-mini+epochs=3"
    assert preset.override(spec_from_values({"threads": "1"})).name == "paper-mini"  # not in the hash
    assert preset.override(spec_from_values({"epochs": "3"}, name="mine")).name == "mine"


def _store_state(uri):
    return sorted(
        (r.info.run_id, r.info.status, r.info.end_time, sorted(r.data.tags.items()), sorted(r.data.params.items()))
        for r in stored_runs(uri)
    )


@pytest.mark.slow(seconds=50)
def test_relaunching_resumes_refuses_or_extends(tracking_uri, tmp_path):
    out = ["--tracking-uri", tracking_uri, "--out", str(tmp_path / "out")]
    first = runner.invoke(app, ["sweep", *TINY, "--epochs", "1", *out])
    assert first.exit_code == 0, first.output

    again = runner.invoke(app, ["sweep", *TINY, "--epochs", "1", *out])
    assert again.exit_code == 0, again.output
    assert "2 cells: 0 ran, 2 skipped" in again.output

    before = _store_state(tracking_uri)
    refused = runner.invoke(app, ["sweep", *TINY, "--epochs", "2", *out])
    assert refused.exit_code == 2, refused.output
    [line] = [line for line in refused.output.splitlines() if line.startswith("Error")]
    assert "sweep 'mix' was launched with another grid (epochs 1 (this launch: 2))" in line
    assert "Traceback" not in refused.output
    assert _store_state(tracking_uri) == before  # nothing written

    extended = runner.invoke(app, ["sweep", *TINY, "--epochs", "2", "--extend", *out])
    assert extended.exit_code == 0, extended.output
    assert "2 cells: 2 ran, 0 skipped" in extended.output
    assert len(children(tracking_uri, "mix")) == 4
    # both grids are the sweep's now: either resumes it
    for epochs in ("1", "2"):
        resumed = runner.invoke(app, ["sweep", *TINY, "--epochs", epochs, *out])
        assert resumed.exit_code == 0 and "0 ran, 2 skipped" in resumed.output, resumed.output
