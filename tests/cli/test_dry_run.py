"""``initmem sweep --dry-run`` knows the store: the cells done, those another live sweep process
holds and those to run, the cost of those alone; a grid the sweep's name was not launched with is
refused as a launch refuses it, before any plan; the forecast names only the claims the sweep's
groups can test, with what a short group needs; its JSON holds numbers as numbers."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_cli.dry_run import forecast_claims, varying_settings
from initmem_core.sweep.grid import plan_sweep
from initmem_core.sweep.identity import GridIdentity
from initmem_core.tracking.cells import LEASES_FOLDER, CellLeases
from initmem_core.tracking.sweep_runs import SweepRuns
from initmem_core.tracking.uris import DEFAULT_EXPERIMENT, store_folder
from initmem_core.vocabulary import CONFIG_HASH_TAG, DIVERGED_TAG, FAILED, FINISHED, GRID_TAG, PARENT_TAG, SWEEP_TAG

runner = CliRunner(env={"COLUMNS": "120"})
GRID = ["--sigma", "0.5,2", "--train-size", "64", "--batch-size", "32", "--epochs", "1", "--name", "small"]
SPEC = {"sigma": [0.5, 2.0], "train_size": 64, "batch_size": 32, "epochs": 1}


def stored_sweep(uri: str, statuses: list[tuple[str, str]]) -> list[str]:
    """Sweep ``small`` in the store as a launch leaves it: the parent with its grid's identity and
    one child per cell, ended with each (status, diverged tag); returns the cells' config hashes."""
    plan = plan_sweep(SPEC, name="small")
    runs = SweepRuns(uri, DEFAULT_EXPERIMENT, "small")
    identity = GridIdentity.of(plan.cells)
    runs.add_parent_params(identity.values)
    runs.set_parent_tags({GRID_TAG: identity.digest})
    client = runs._client
    for cell, (status, diverged) in zip(plan.plans, statuses):
        tags = {PARENT_TAG: runs.parent_id, SWEEP_TAG: "small", CONFIG_HASH_TAG: cell.config_hash}
        run_id = runs.create_child(cell.config.run_name(), {**tags, DIVERGED_TAG: diverged})
        client.set_terminated(run_id, status)
    runs.end(FINISHED)
    return [cell.config_hash for cell in plan.plans]


def dry_run(uri: str, *extra: str):
    return runner.invoke(app, ["sweep", *GRID, *extra, "--tracking-uri", uri, "--dry-run", "--json"])


def test_a_finished_sweeps_dry_run_has_no_cell_to_run(tracking_uri):
    stored_sweep(tracking_uri, [(FINISHED, ""), (FAILED, "true")])  # a divergence is final
    result = dry_run(tracking_uri)
    assert result.exit_code == 0, result.output
    assert "2 done, 0 running elsewhere" in result.stderr and "0 to run" in result.stderr
    document = json.loads(result.stdout)
    assert document["store"] == {"done": 2, "running elsewhere": 0, "to run": 0, "note": ""}
    assert [cell["store"] for cell in document["cells"]] == ["done", "done"]
    assert document["estimate"] is None and document["disk_bytes"]["kept"] == 0
    assert document["work"] == {"text": "none", "optimizer_steps": None, "epochs": 0}
    retried = json.loads(dry_run(tracking_uri, "--retry-failed").stdout)  # the diverged cell runs again
    assert retried["store"]["to run"] == 1 and retried["work"]["optimizer_steps"] == 2


def test_a_failed_cell_is_to_run_and_a_leased_one_running_elsewhere(tracking_uri):
    hashes = stored_sweep(tracking_uri, [(FAILED, ""), (FAILED, "")])
    leases = CellLeases(store_folder(tracking_uri) / LEASES_FOLDER)
    assert leases.take(hashes[1])  # as a live sweep process holds it
    try:
        result = dry_run(tracking_uri)
    finally:
        leases.release()
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [cell["store"] for cell in document["cells"]] == ["to run", "running elsewhere"]
    # the estimate counts the one cell to run: 1 epoch of 64 / 32 steps
    assert document["estimate"]["steps"] == 2 and document["work"]["optimizer_steps"] == 2
    assert isinstance(document["estimate"]["seconds_here"], float)


def test_a_changed_grid_is_refused_in_one_line_with_no_plan(tracking_uri):
    stored_sweep(tracking_uri, [(FINISHED, ""), (FINISHED, "")])
    result = runner.invoke(
        app, ["sweep", *GRID, "--epochs", "2", "--tracking-uri", tracking_uri, "--dry-run"]
    )  # --epochs 2: another grid under the name "small"
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert "sweep 'small' was launched with another grid (epochs 1 (this launch: 2))" in line
    extended = runner.invoke(
        app, ["sweep", *GRID, "--epochs", "2", "--extend", "--tracking-uri", tracking_uri, "--dry-run"]
    )
    assert extended.exit_code == 0 and "0 done" in extended.output, extended.output  # --extend: its cells are new


def test_a_store_with_no_such_sweep_has_every_cell_to_run(tmp_path):
    result = dry_run(f"sqlite:///{tmp_path / 'none.db'}")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["store"]["to run"] == 2
    assert not (tmp_path / "none.db").exists()  # a dry run creates no store


def test_only_the_claims_the_groups_can_test_are_forecast_with_what_a_short_group_needs(tmp_path):
    opt_only = plan_sweep({"opt": ["sgd", "adam"], "lr": 0.001}).cells
    assert varying_settings(opt_only) == {"opt"}
    by_clock = forecast_claims(opt_only)
    assert "larger_batch_increases_spread" not in sum(by_clock.values(), [])  # the batch does not vary
    assert "sgd_remembers_more_than_adaptive" in by_clock["clock_adapt"] and "clock_sgd" not in by_clock

    args = ["sweep", "--batch-size", "16,32", "--lr", "0.5", "--sigma", "1", "--train-size", "64", "--epochs", "1"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    [*rows] = json.loads(result.stdout)["regime"]
    assert rows and all(row["clock"] == "clock_sgd" for row in rows)
    assert all("larger_batch_increases_spread" in row["claims"] for row in rows)
    assert all("sgd_remembers_more_than_adaptive" not in row["claims"] for row in rows)
    for row in rows:  # far short in 1 epoch: the epochs that reach the threshold, and the --until target
        assert row["short"] and row["epochs_needed"] > 1
        assert row["until_needed"] == f"clock_sgd={row['threshold']:g}"
    # the stated epochs do reach it: a group given them is no longer short (T_SGD = 1 epoch * 4 * 0.25 / 16)
    most = max(row["epochs_needed"] for row in rows)
    again = runner.invoke(app, [*args[:-1], str(most), "--out", str(tmp_path), "--dry-run", "--json"])
    assert not any(row["short"] for row in json.loads(again.stdout)["regime"])


def test_the_dry_runs_work_is_numbers_beside_its_text(tmp_path):
    result = dry_run(f"sqlite:///{tmp_path / 'none.db'}")
    assert result.exit_code == 0, result.output
    work = json.loads(result.stdout)["work"]
    assert work["optimizer_steps"] == 4 and work["epochs"] == 2 and work["text"] == "4 optimizer steps"


def test_sweep_help_states_the_threads_a_cell_runs_with():
    text = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["sweep", "--help"]).output
    [line] = [line for line in text.splitlines() if "--threads " in line and "CPU threads" in line]
    following = text.splitlines()[text.splitlines().index(line) : text.splitlines().index(line) + 3]
    assert any("[default: (1 per cell with --executor local" in part for part in following), following
    run_help = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["run", "--help"]).output
    assert "1 per cell" not in run_help  # a single run: torch's own default
