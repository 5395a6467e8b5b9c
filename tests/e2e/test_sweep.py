"""`initmem sweep` and `initmem report` end to end on digits: the MLflow layout, the report on the
parent, resuming, failing cells, and N workers on one SQLite store losing nothing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core import hookimpl
from initmem_core.groups import metric_suffix, short_labels
from initmem_core.plugin_system.loader import load_registry, set_registry
from initmem_core.training.checkpoint_store import CHECKPOINTS_FOLDER
from initmem_core.vocabulary import FIT, PER_EPOCH_METRICS, REPAIR_GAP, SELECTION_METRICS, STOP_EPOCH, TAU_INTERP
from tests.support.cli_processes import mlflow_client, stored_runs

pytestmark = pytest.mark.slow  # end-to-end sweeps with worker processes

runner = CliRunner(env={"COLUMNS": "200"})  # rich wraps long lines at 80
SMALL = [
    "--data",
    "digits",
    "--arch",
    "resnet20",
    "--epochs",
    "2",
    "--train-size",
    "200",
    "--batch-size",
    "50",
    "--eval-batch-size",
    "512",
]
ONE_THREAD = ["--threads", "1"]  # the machine may be shared: no oversubscription
GRID = ["--sigma", "0.5,2", "--opt", "sgd,adam", "--seed", "0"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = (
    "test_acc_vs_sigma.png",
    "weight_norm_vs_epoch.png",
    "spread_vs_clocks.png",
    "tau_interp_vs_sigma.png",
    "memory_vs_epoch.png",
    "memory_vs_clock.png",
    "verdicts.png",
)


def split(runs):
    parents = [r for r in runs if r.data.tags.get("initmem.role") == "parent"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


@pytest.fixture(scope="module")
def swept(tmp_path_factory, store_in):
    """One 2-sigma x 2-optimizer x 1-seed sweep, shared by the tests that only read it."""
    folder = tmp_path_factory.mktemp("sweep")
    uri, out = store_in(folder), folder / "out"
    result = runner.invoke(
        app, ["sweep", *SMALL, *ONE_THREAD, *GRID, "--name", "e2e", "--tracking-uri", uri, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return uri, out, result


def test_one_parent_and_one_child_per_cell_in_one_experiment(swept):
    uri, _, result = swept
    assert "sweep e2e" in result.output
    [parent], children = split(stored_runs(uri))
    assert parent.data.tags["initmem.sweep"] == "e2e" and parent.info.status == "FINISHED"
    assert parent.info.run_id in result.output
    assert len(children) == 4
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert {c.info.experiment_id for c in children} == {parent.info.experiment_id}
    assert {c.info.status for c in children} == {"FINISHED"}
    assert {c.data.tags["initmem.sweep"] for c in children} == {"e2e"}
    assert sorted((c.data.tags["initmem.group"].split(",")[0], c.data.params["sigma"]) for c in children) == [
        ("opt=adam", "0.5"),
        ("opt=adam", "2.0"),
        ("opt=sgd", "0.5"),
        ("opt=sgd", "2.0"),
    ]
    for c in children:  # complete labels: every value but sigma and seed that is not the default
        assert c.data.tags["initmem.group"] == (
            f"opt={c.data.params['opt']},lr={float(c.data.params['lr']):g},batch_size=50,epochs=2,train_size=200"
        )
        # and the short one the prepared view groups by: what tells the two groups apart
        assert c.data.tags["initmem.group_label"] == f"{c.data.params['opt']},lr={float(c.data.params['lr']):g}"
    # names carry what tells the cells apart; the parent carries the grid and a description
    assert sorted(c.info.run_name for c in children) == [
        "resnet20-adam-s0.5-seed0",
        "resnet20-adam-s2.0-seed0",
        "resnet20-sgd-s0.5-seed0",
        "resnet20-sgd-s2.0-seed0",
    ]
    assert (parent.data.params["opt"], parent.data.params["sigma"], parent.data.params["epochs"]) == (
        "sgd,adam",
        "0.5,2.0",
        "2",
    )
    assert "| spread pp |" in parent.data.tags["mlflow.note.content"]
    # the paper's claims on the parent: one verdict tag each (one seed: SGD against Adam cannot be decided,
    # unless a run did not fit its training set in 2 epochs: then it is under-trained, the regime's first check)
    from initmem_core.report.verdicts import CANNOT_DECIDE, UNDER_TRAINED
    from initmem_core.vocabulary import verdict_tag
    from initmem_plugins.claims.declared import STATEMENTS

    assert all(verdict_tag(name) in parent.data.tags for name in STATEMENTS)
    unfit = any(c.data.metrics["fit"] == 0 for c in children)
    expected = UNDER_TRAINED if unfit else CANNOT_DECIDE
    assert parent.data.tags[verdict_tag("sgd_remembers_more_than_adaptive")] == expected
    assert "Claims on this sweep" in parent.data.tags["mlflow.note.content"]
    assert {i.dataset.name for c in children for i in c.inputs.dataset_inputs} == {"digits"}
    assert len({c.data.tags["config_hash"] for c in children}) == 4


def test_the_report_is_on_the_parent_and_in_the_output_folder(swept, tmp_path):
    from matplotlib import image

    uri, out, _ = swept
    [parent], children = split(stored_runs(uri))
    client = mlflow_client(uri)
    for group in ("sgd", "adam"):
        accs = [100 * c.data.metrics["best_val_test_acc"] for c in children if c.data.params["opt"] == group]
        suffix = metric_suffix(next(c.data.tags["initmem.group"] for c in children if c.data.params["opt"] == group))
        assert parent.data.metrics[f"spread_{suffix}"] == pytest.approx(max(accs) - min(accs), abs=0.005)
        assert f"never_interp_sigmas_{suffix}" in parent.data.metrics
        assert parent.data.metrics[f"failed_cells_{suffix}"] == 0
        # memory over training as step metrics (step = epoch), in the first report's section of the
        # charts (report-1/): MLflow charts them as curves
        radial = client.get_metric_history(parent.info.run_id, f"report-1/radial_memory_{suffix}")
        assert sorted(m.step for m in radial) == [0, 1, 2]
        assert next(m.value for m in radial if m.step == 0) == pytest.approx(1.0, abs=0.05)  # ||W0|| ~ sigma
        cosine = client.get_metric_history(parent.info.run_id, f"report-1/directional_memory_{suffix}")
        assert {m.step: m.value for m in cosine}[0] == pytest.approx(1.0)
    assert parent.data.tags["initmem.curves"] == "report-1"
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {f"report/{name}" for name in ("report.csv", "report.md", *PLOTS)} <= artifacts
    assert "sweep.json" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    logged = client.download_artifacts(parent.info.run_id, "report/test_acc_vs_sigma.png", str(tmp_path))
    assert open(logged, "rb").read(8) == PNG_SIGNATURE
    for name in PLOTS:
        assert (out / name).read_bytes()[:8] == PNG_SIGNATURE
        assert image.imread(out / name).ndim == 3
    report_md = (out / "report.md").read_text()
    labels = short_labels(sorted({c.data.tags["initmem.group"] for c in children}))[0]
    assert all(f"| {label} |" in report_md for label in labels.values())  # each group by its one short label


def test_report_command_rebuilds_the_table_from_the_store_alone(swept, tmp_path):
    uri, _, _ = swept
    [parent], _ = split(stored_runs(uri))
    result = runner.invoke(app, ["report", "e2e", "--format", "json", "--tracking-uri", uri, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["groups"]) == 2
    # every group's half-lives, read from the children's metric histories alone
    assert set(data["forgetting"]) == {g["group"] for g in data["groups"]}
    for found in data["forgetting"].values():
        assert {"radial", "directional"} <= set(found["half_lives"])
        assert [p["epoch"] for p in found["curves"]["radial"]] == [0, 1, 2]
        radial = found["half_lives"]["radial"]
        assert radial["horizon_epoch"] == 2 and radial["horizon_clock_adapt"] > 0
        assert radial["reached"] == (radial["epoch"] is not None)
    for g in data["groups"]:  # the parent's metric is the report's spread, rounded for the UI
        assert parent.data.metrics[f"spread_{metric_suffix(g['group'])}"] == pytest.approx(g["spread"], abs=0.005)
    assert "prepared comparison in the MLflow UI: http://127.0.0.1:5000/#/experiments/" in result.stderr
    assert all((tmp_path / name).is_file() for name in PLOTS)
    by_id = runner.invoke(
        app, ["report", parent.info.run_id, "--format", "csv", "--tracking-uri", uri, "--out", str(tmp_path)]
    )
    assert by_id.exit_code == 0 and by_id.stdout.startswith("group,label,sigma,")
    table = runner.invoke(app, ["report", "e2e", "--tracking-uri", uri, "--out", str(tmp_path)])
    assert table.exit_code == 0 and "adam,lr=0.001" in table.stdout  # the group by its short label
    unknown = runner.invoke(app, ["report", "e2f", "--tracking-uri", uri])
    assert unknown.exit_code == 2
    assert "no sweep 'e2f' in experiment 'initmem'; sweeps there: e2e" in unknown.output


def test_relaunching_skips_finished_cells(swept):
    uri, out, _ = swept
    before = {r.info.run_id for r in stored_runs(uri)}
    again = runner.invoke(
        app, ["sweep", *SMALL, *ONE_THREAD, *GRID, "--name", "e2e", "--tracking-uri", uri, "--out", str(out)]
    )
    assert again.exit_code == 0, again.output
    assert "4 cells: 0 ran, 4 skipped" in again.output
    runs = stored_runs(uri)
    assert {r.info.run_id for r in runs} == before
    [parent], _ = split(runs)
    assert parent.info.status == "FINISHED"


def test_dry_run_prints_the_cells_and_runs_nothing(tmp_path):
    uri = f"sqlite:///{tmp_path / 'never.db'}"
    result = runner.invoke(app, ["sweep", *SMALL, *GRID, "--dry-run", "--tracking-uri", uri])
    assert result.exit_code == 0, result.output
    assert "4 cells in 2 group(s): 0 done, 0 running elsewhere, 4 to run" in result.output
    assert "estimated work of those to run: 32 optimizer steps" in result.output
    assert "opt=adam" in result.output and "dry run" in result.output
    assert not (tmp_path / "never.db").exists()


def test_a_sweep_file_gives_the_grid_and_options_override_it(tmp_path):
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(
        'name = "from-file"\n[base]\nepochs = 3\n[grid]\nsigma = "0.5:1.5:3"\nopt = ["sgd", "adam"]\n'
    )
    result = runner.invoke(
        app,
        [
            "sweep",
            "--config",
            str(sweep_file),
            "--opt",
            "muon",
            "--train-size",
            "100",
            "--batch-size",
            "50",
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "sweep from-file" in result.output
    assert "3 cells in 1 group(s): 0 done, 0 running elsewhere, 3 to run" in result.output
    assert "estimated work of those to run: 18 optimizer steps" in result.output


def test_bad_grid_exits_2_before_anything_is_tracked(tracking_uri):
    result = runner.invoke(app, ["sweep", *SMALL, "--sigma", "0.1:2.5:x", "--tracking-uri", tracking_uri])
    assert result.exit_code == 2
    assert "the count of a range must be a whole number" in result.output
    quoted = runner.invoke(app, ["sweep", *SMALL, "--name", "it's", "--tracking-uri", tracking_uri])
    assert quoted.exit_code == 2 and 'sweep name "it\'s": use up to 200 letters' in quoted.output
    assert stored_runs(tracking_uri) == []


class Boom:
    """Two optimizers that fail: one while it is built, one at its first step."""

    @staticmethod
    def build(model, config):
        raise RuntimeError("boom: this optimizer cannot be built")

    @staticmethod
    def build_failing_step(model, config):
        class FailingStep(torch.optim.SGD):
            def step(self, closure=None):
                raise RuntimeError("boom: this step always fails")

        return FailingStep(model.parameters(), lr=config.lr)

    @hookimpl
    def initmem_register_optimizers(self, register):
        register("boom", self.build, "fails when built")
        register("boom-step", self.build_failing_step, "fails at its first step")


def test_a_failing_cell_does_not_stop_the_sweep(tracking_uri, tmp_path):
    set_registry(load_registry(entry_points=False, extra_plugins=[("boom", Boom())]))
    result = runner.invoke(
        app,
        [
            "sweep",
            *SMALL,
            *ONE_THREAD,
            "--opt",
            "boom,sgd,boom-step",
            "--name",
            "failing",
            "--tracking-uri",
            tracking_uri,
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 1, result.output
    assert "3 cells: 1 ran, 0 skipped (ended before: finished or diverged), 2 failed" in result.output
    assert "boom: this optimizer cannot be built" in result.output
    [parent], children = split(stored_runs(tracking_uri))
    status = {c.data.params["opt"]: c for c in children}
    assert {opt: c.info.status for opt, c in status.items()} == {
        "sgd": "FINISHED",
        "boom": "FAILED",
        "boom-step": "FAILED",
    }
    assert "RuntimeError: boom: this optimizer cannot be built" in status["boom"].data.tags["failure_reason"]
    assert "boom: this step always fails" in status["boom-step"].data.tags["failure_reason"]
    assert parent.info.status == "FAILED" and parent.data.tags["initmem.cells_failed"] == "2"
    assert [v for k, v in parent.data.metrics.items() if k.startswith("failed_cells_opt-boom.")] == [1]
    # Relaunching retries the failed cells only, and the report counts each cell once.
    again = runner.invoke(
        app,
        [
            "sweep",
            *SMALL,
            *ONE_THREAD,
            "--opt",
            "boom,sgd,boom-step",
            "--name",
            "failing",
            "--tracking-uri",
            tracking_uri,
            "--out",
            str(tmp_path),
        ],
    )
    assert (
        again.exit_code == 1
        and "3 cells: 0 ran, 1 skipped (ended before: finished or diverged), 2 failed" in again.output
    )
    [parent], children = split(stored_runs(tracking_uri))
    assert sorted(c.data.params["opt"] for c in children) == ["boom", "boom", "boom-step", "boom-step", "sgd"]
    assert [v for k, v in parent.data.metrics.items() if k.startswith("failed_cells_opt-boom.")] == [1]


def test_two_workers_on_one_sqlite_store_lose_no_metric_row(tracking_uri, tmp_path):
    """Every (child, metric) holds every step: 0..epochs for per-epoch metrics, one summary row.

    The train_size=5 cells fail inside their worker (the batch is larger than the training set):
    they end FAILED with their reason, and the others still finish.
    """
    epochs = 2
    sizes = [arg if arg != "200" else "200,5" for arg in SMALL]
    result = runner.invoke(
        app,
        [
            "sweep",
            *sizes,
            "--sigma",
            "0.5,2",
            "--seed",
            "0,1",
            "--workers",
            "2",
            "--name",
            "parallel",
            "--tracking-uri",
            tracking_uri,
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 1, result.output
    assert "8 cells: 4 ran, 0 skipped (ended before: finished or diverged), 4 failed" in result.output
    _, children = split(stored_runs(tracking_uri))
    failed = [c for c in children if c.info.status == "FAILED"]
    children = [c for c in children if c.info.status == "FINISHED"]
    assert {c.data.params["train_size"] for c in failed} == {"5"} and len(failed) == 4
    assert all("larger than the training set" in c.data.tags["failure_reason"] for c in failed)
    assert len(children) == 4 and {c.data.params["train_size"] for c in children} == {"200"}
    assert {c.data.params["threads"] for c in children} == {"1"}  # pinned, not a share of the machine
    database = tracking_uri[len("sqlite:///") :]
    # Workers never open the store, yet keep their checkpoints beside it, as in-process cells do.
    checkpoints = Path(database).parent / CHECKPOINTS_FOLDER
    assert all(any((checkpoints / c.data.params["config_hash"]).glob("*.pt")) for c in children)
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT run_uuid, key, step FROM metrics").fetchall()
    steps: dict[tuple[str, str], list[int]] = {}
    for run_id, key, step in rows:
        steps.setdefault((run_id, key), []).append(step)
    per_epoch = set(PER_EPOCH_METRICS)
    summary = set(SELECTION_METRICS) | {FIT, STOP_EPOCH}
    batch = {"train_loss_batch", "train_acc_batch"}  # running train-mode figures: epochs 1.. only
    expected_rows = 0
    for child in children:
        run_id = child.info.run_id
        keys = {key for (rid, key) in steps if rid == run_id}
        interpolated = "tau_interp" in keys
        assert keys == per_epoch | batch | summary | ({TAU_INTERP, REPAIR_GAP} if interpolated else set())
        for key in keys:
            expected = (
                list(range(epochs + 1))
                if key in per_epoch
                else list(range(1, epochs + 1))
                if key in batch
                else [epochs]
            )
            assert sorted(steps[(run_id, key)]) == expected, key
        expected_rows += (epochs + 1) * len(per_epoch) + epochs * len(batch) + len(summary) + 2 * interpolated
    child_ids = {c.info.run_id for c in children}
    # 8 summary figures a cell: the selection's six (test_examples among them), fit and stop_epoch
    assert sum(1 for run_id, _, _ in rows if run_id in child_ids) == expected_rows == 4 * 3 * 14 + 4 * 2 * 2 + 4 * 8


def test_ui_binds_localhost_and_checks_the_sweep_before_starting_a_server(tracking_uri, monkeypatch):
    # The real server, its URLs and its shutdown: tests/e2e/test_mlflow_ui.py.
    from initmem_cli.ui import ui_args

    started = []
    monkeypatch.setattr("initmem_cli.ui.subprocess.Popen", lambda *a, **k: started.append(a))
    assert ui_args("sqlite:///x.db", "127.0.0.1", 5000)[2:] == [
        "mlflow",
        "ui",
        "--backend-store-uri",
        "sqlite:///x.db",
        "--host",
        "127.0.0.1",
        "--port",
        "5000",
        "--workers",
        "1",
    ]
    result = runner.invoke(app, ["ui", "--sweep", "nope", "--tracking-uri", tracking_uri])
    assert result.exit_code == 2 and "experiment 'initmem' does not exist" in result.stderr and not started


SWEEP_PROCESS = """
import multiprocessing, sys, time
from initmem_core.sweep.launch import run_sweep

if __name__ == "__main__":
    grid = {"sigma": [0.5, 2], "epochs": 1, "train_size": 100, "batch_size": 50, "eval_batch_size": 512}
    first = run_sweep(grid, name="light", workers=2, tracking_uri=sys.argv[1], out="out")
    again = run_sweep(grid, name="light", workers=2, tracking_uri=sys.argv[1], out="out")  # nothing to run
    deadline = time.monotonic() + 15
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    print([c.status for c in first.cells], [c.skipped for c in again.cells], "torch" in sys.modules,
          len(multiprocessing.active_children()))
"""


def test_the_sweep_process_leaves_torch_to_its_workers_and_stops_them(tracking_uri, tmp_path):
    """Workers start before the store is opened and import torch meanwhile; the sweep process
    itself never does. Workers a relaunch did not need are stopped."""
    import subprocess
    import sys

    script = tmp_path / "sweep_process.py"
    script.write_text(SWEEP_PROCESS)
    done = subprocess.run([sys.executable, str(script), tracking_uri], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "['FINISHED', 'FINISHED'] [True, True] False 0"
