"""Sweeps on the Ray and Slurm executors, on real components on this machine: a Ray head and an
MLflow tracking server on 127.0.0.1, and submitit's local executor in place of Slurm.

Every cell of a remote sweep must end exactly as with the local executor (CPU, one thread: the
same config computes the same numbers), once, in one child run, even when its worker is killed
(Ray runs it again) or its job is preempted (submitit requeues it). ``pausing-sgd`` (see
``pausing_plugin``) holds one cell still mid-training so that a test can do that to it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.network_isolation import loopback_only  # noqa: E402

# Present, not imported: every test here is slow, and the quick loop collects this file too (Ray
# takes 0.4 s of CPU to import, in each xdist worker).
for _needed in ("ray", "submitit"):
    try:
        _found = importlib.util.find_spec(_needed) is not None
    except ImportError:  # a finder that refuses it (tests/support/blocked_imports.py, as on the GPU machine)
        _found = False
    if not _found:
        pytest.skip(f"could not import '{_needed}'", allow_module_level=True)
# Ray reaches for outside addresses; test_executors_isolated.py runs this file in a namespace with only loopback.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not loopback_only(), reason="needs a loopback-only network namespace"),
]

from initmem_cli.app import app  # noqa: E402
from initmem_core.config import RunConfig  # noqa: E402
from initmem_core.plugin_system.loader import load_registry, set_registry  # noqa: E402
from initmem_plugins.executors.remote_cell import CellTask, RetriedCellProgress, run_remote_cell  # noqa: E402
from initmem_plugins.executors.slurm import ProgressFile  # noqa: E402
from tests.support import pausing_plugin  # noqa: E402  (the workers get it from plugin_site)
from tests.support.cli_processes import SMALL_CELL_ARGS, history, mlflow_client, stored_runs  # noqa: E402
from tests.support.local_services import mlflow_server, processes, ray_head  # noqa: E402

runner = CliRunner(env={"COLUMNS": "200"})
GRID = ["--opt", "sgd,pausing-sgd", "--sigma", "0.5,2", "--seed", "0"]
#: The sweeps here test one cell a process or task (test_lockstep_remote.py tests fused jobs).
LONE = ("--lockstep", "off")
PER_EPOCH = ("train_loss", "train_acc", "val_acc", "test_acc", "weight_norm", "clock_sgd", "lr")
PAUSE_S = 150  # how long a test waits for a cell to pause


def children(uri: str, sweep: str) -> list:
    return [
        r
        for r in stored_runs(uri)
        if r.data.tags.get("initmem.sweep") == sweep and r.data.tags.get("initmem.role") != "parent"
    ]


def figures(uri: str, run) -> dict:
    """What the report reads from a cell, with every logged row of the per-epoch metrics."""
    return {
        "best_val_test_acc": run.data.metrics["best_val_test_acc"],
        "final_test_acc": run.data.metrics["final_test_acc"],
        **{key: history(uri, run.info.run_id, key) for key in PER_EPOCH},
    }


def report_json(uri: str, sweep: str, out: Path) -> dict:
    result = runner.invoke(app, ["report", sweep, "--format", "json", "--tracking-uri", uri, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """``pausing_plugin`` installed as pip would, for processes started with it on PYTHONPATH."""
    return pausing_plugin.install(tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def server(tmp_path_factory, _empty_store):
    folder = tmp_path_factory.mktemp("server")
    shutil.copy(_empty_store, folder / "server.db")  # already migrated: the server starts sooner
    with mlflow_server(folder / "server.db", folder / "artifacts") as url:
        yield url


@pytest.fixture
def pausing(monkeypatch, plugin_site, tmp_path):
    """This process knows ``pausing-sgd``; processes it starts load it as a plugin, and the first
    cell to reach step 5 pauses. Returns the file the paused cell writes its process id into."""
    set_registry(load_registry(extra_plugins=[("pausing", pausing_plugin)]))
    marker = tmp_path / "paused.pid"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugin_site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv(pausing_plugin.PAUSE_ENV, str(marker))
    monkeypatch.delenv("INITMEM_LOAD_PLUGINS", raising=False)
    return marker


@pytest.fixture(scope="module")
def reference(tmp_path_factory, store_in):
    """The grid on the local executor, in this process: what the other executors must reproduce."""
    folder = tmp_path_factory.mktemp("reference")
    uri = store_in(folder)
    set_registry(load_registry(extra_plugins=[("pausing", pausing_plugin)]))
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(pausing_plugin.PAUSE_ENV, raising=False)  # nothing pauses here
        try:
            result = runner.invoke(
                app,
                [
                    "sweep",
                    *LONE,
                    *SMALL_CELL_ARGS,
                    *GRID,
                    "--name",
                    "reference",
                    "--tracking-uri",
                    uri,
                    "--out",
                    str(folder / "out"),
                    "--checkpoint-dir",
                    str(folder / "checkpoints"),
                ],
            )
        finally:
            set_registry(None)
    assert result.exit_code == 0, result.output
    return uri, {run.data.tags["config_hash"]: figures(uri, run) for run in children(uri, "reference")}


def when_paused(marker: Path, act) -> threading.Thread:
    """In the background: once a cell paused (its process id is in ``marker``), ``act(pid)``."""

    def watch() -> None:
        deadline = time.monotonic() + PAUSE_S
        while time.monotonic() < deadline:
            text = marker.read_text() if marker.exists() else ""
            if text:
                act(int(text))
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def assert_each_cell_once_as_in_reference(uri: str, sweep: str, reference, cells: int) -> list:
    runs = children(uri, sweep)
    assert len(runs) == cells and {r.info.status for r in runs} == {"FINISHED"}
    assert len({r.data.tags["config_hash"] for r in runs}) == cells  # no cell has a second child run
    for run in runs:
        assert figures(uri, run) == reference[1][run.data.tags["config_hash"]], run.info.run_name
    return runs


def test_a_ray_sweep_into_a_server_matches_the_local_executor_and_survives_a_killed_worker(
    server, reference, pausing, monkeypatch, tmp_path
):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a test head on this machine, for this process only
    killed = []
    with ray_head(2, dict(os.environ)) as address:
        killer = when_paused(pausing, lambda pid: (os.kill(pid, signal.SIGKILL), killed.append(pid)))
        result = runner.invoke(
            app,
            [
                "sweep",
                *LONE,
                *SMALL_CELL_ARGS,
                *GRID,
                "--name",
                "on-ray",
                "--executor",
                "ray",
                "--ray-address",
                address,
                "--tracking-uri",
                server,
                "--out",
                str(tmp_path / "out"),
                "--checkpoint-dir",
                str(tmp_path / "checkpoints"),
            ],
        )
        killer.join(timeout=1)
    assert result.exit_code == 0, result.output
    assert "4 cells: 4 ran, 0 skipped (ended before: finished or diverged), 0 failed" in result.output
    assert killed, "no cell paused, so no worker was killed"
    runs = assert_each_cell_once_as_in_reference(server, "on-ray", reference, cells=4)
    [retried] = [run for run in runs if run.data.tags["initmem.attempts"] != "1"]  # ran again, in the same run
    assert retried.data.tags["initmem.attempts"] == "2" and retried.data.params["opt"] == "pausing-sgd"
    assert not retried.data.tags["initmem.worker"].endswith(f":{killed[0]}")  # another worker process finished it
    assert report_json(server, "on-ray", tmp_path / "r1") == report_json(reference[0], "reference", tmp_path / "r2")


def test_slurm_through_submitits_local_executor_runs_a_sweep_and_requeues_a_preempted_cell(
    server, reference, pausing, tmp_path
):
    signalled = []
    # SIGUSR2 is how Slurm (through submitit) warns a job before preempting it or at its time limit.
    killer = when_paused(pausing, lambda pid: (os.kill(pid, signal.SIGUSR2), signalled.append(pid)))
    result = runner.invoke(
        app,
        [
            "sweep",
            *LONE,
            *SMALL_CELL_ARGS,
            "--opt",
            "pausing-sgd",
            "--sigma",
            "0.5,2",
            "--seed",
            "0",
            "--name",
            "on-slurm",
            "--executor",
            "slurm",
            "--slurm-local",
            "--tracking-uri",
            server,
            "--out",
            str(tmp_path / "out"),
            "--checkpoint-dir",
            str(tmp_path / "checkpoints"),
        ],
    )
    killer.join(timeout=1)
    assert result.exit_code == 0, result.output
    assert "2 cells: 2 ran, 0 skipped (ended before: finished or diverged), 0 failed" in result.output
    assert signalled, "no cell paused, so no job was preempted"
    runs = assert_each_cell_once_as_in_reference(server, "on-slurm", reference, cells=2)
    [requeued] = [run.info.run_id for run in runs if run.data.tags["initmem.attempts"] == "2"]
    events = [call_args for _, *call_args in ProgressFile(tmp_path / "out/slurm/progress" / f"{requeued}.jsonl").take()]
    second_start = [call for call, _ in events].index("start", 1)
    # It resumed from its checkpoint of epoch 1 (the 4 steps of epoch 1 at once), not from the start.
    assert events[second_start + 1] == ["advance", [4]]


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_slurm_runs_cells_sharing_a_gpu_side_by_side_in_one_task_and_requeues_them_together(
    server, reference, pausing, tmp_path
):
    """--gpus-per-cell 0.5: both cells in one array task (one GPU's worth), each in its own
    process under the task's; Slurm's warning reaches every process of the job, the task
    requeues, and each cell finishes (the paused one from its checkpoint) as in the reference."""
    signalled = []

    def preempt(pid: int) -> None:
        task = parent_of(pid)
        signalled.append((pid, task, Path(f"/proc/{task}/cmdline").read_bytes(), parent_of(task)))
        for target in (pid, task):
            os.kill(target, signal.SIGUSR2)

    killer = when_paused(pausing, preempt)
    result = runner.invoke(
        app,
        [
            "sweep",
            *LONE,
            *SMALL_CELL_ARGS,
            "--opt",
            "pausing-sgd",
            "--sigma",
            "0.5,2",
            "--seed",
            "0",
            "--name",
            "packed",
            "--executor",
            "slurm",
            "--slurm-local",
            "--gpus-per-cell",
            "0.5",
            "--tracking-uri",
            server,
            "--out",
            str(tmp_path / "out"),
            "--checkpoint-dir",
            str(tmp_path / "checkpoints"),
        ],
    )
    killer.join(timeout=1)
    assert result.exit_code == 0, result.output
    assert "2 cells: 2 ran, 0 skipped (ended before: finished or diverged), 0 failed" in result.output
    assert signalled, "no cell paused, so no job was preempted"
    [(cell_pid, task_pid, task_command, job_id)] = signalled
    assert cell_pid != task_pid and b"submitit.core._submit" in task_command  # a cell process under the task
    # One array task (submitit's local job, named by its controller's process id) for both cells.
    assert [folder.name for folder in (tmp_path / "out/slurm").iterdir() if folder.name.isdigit()] == [str(job_id)]
    runs = assert_each_cell_once_as_in_reference(server, "packed", reference, cells=2)
    progress = {
        run.info.run_id: [
            call_args
            for _, *call_args in ProgressFile(tmp_path / "out/slurm/progress" / f"{run.info.run_id}.jsonl").take()
        ]
        for run in runs
    }
    for run_id, events in progress.items():  # each cell's progress in its own file
        assert [call for call, _ in events].count("epoch_done") >= 2, (run_id, events)
    requeued = [run.info.run_id for run in runs if run.data.tags["initmem.attempts"] == "2"]
    resumed = [
        run_id
        for run_id in requeued  # the paused cell resumed from its checkpoint of epoch 1
        if (starts := [i for i, (call, _) in enumerate(progress[run_id]) if call == "start"])[1:]
        and progress[run_id][starts[1] + 1] == ["advance", [4]]
    ]
    assert resumed, progress


def ray_children() -> list[str]:
    """Ray's processes started by this process (a local instance's are its children)."""
    return [
        name
        for _, name, state, parent in processes()
        if parent == os.getpid() and name in ("gcs_server", "raylet") and state != "Z"
    ]


def test_ray_without_an_address_starts_its_own_instance_and_stops_it(server, monkeypatch, tmp_path):
    import ray

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # no token written into this machine's home
    no_threads = SMALL_CELL_ARGS[: SMALL_CELL_ARGS.index("--threads")]  # so that the cell's CPU request sets them
    result = runner.invoke(
        app,
        [
            "sweep",
            *LONE,
            *no_threads,
            "--sigma",
            "1",
            "--name",
            "own-ray",
            "--executor",
            "ray",
            "--tracking-uri",
            server,
            "--out",
            str(tmp_path / "out"),
            "--checkpoint-dir",
            str(tmp_path / "checkpoints"),
        ],
    )
    assert result.exit_code == 0, result.output
    [run] = children(server, "own-ray")
    assert run.info.status == "FINISHED" and run.data.tags["initmem.attempts"] == "1"
    assert (run.data.params["threads"], run.data.params["device"]) == ("1", "cpu")  # 1 CPU and no GPU asked for
    assert not ray.is_initialized() and ray_children() == []


def test_ui_points_to_the_server_which_serves_its_own(server):
    result = runner.invoke(app, ["ui", "--tracking-uri", server])
    assert result.exit_code == 0, result.output
    assert f"{server} is an MLflow tracking server; its UI:" in result.output
    assert f"{server}/#/experiments/" in result.output  # the runs page there, not a local server


def test_slurm_gets_one_array_job_with_the_options_given(server, tmp_path, monkeypatch):
    """A stand-in ``sbatch`` keeps the script it is given and refuses it, as a cluster refuses an
    unknown partition: the script holds the options, every cell ends FAILED saying why, and the
    command says it in one line."""
    folder, kept = tmp_path / "bin", tmp_path / "kept.sh"
    folder.mkdir()
    (folder / "sbatch").write_text(
        f'#!/bin/sh\ncp "$1" {kept}\necho "sbatch: error: invalid partition specified: big" >&2\nexit 1\n'
    )
    (folder / "srun").write_text("#!/bin/sh\n")  # submitit looks for it to tell a Slurm machine
    for tool in ("sbatch", "srun"):
        (folder / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    result = runner.invoke(
        app,
        [
            "sweep",
            *LONE,
            *SMALL_CELL_ARGS,
            "--sigma",
            "0.5,1",
            "--name",
            "refused",
            "--executor",
            "slurm",
            "--slurm-partition",
            "big",
            "--slurm-time",
            "30",
            "--cpus-per-cell",
            "4",
            "--gpus-per-cell",
            "1",
            "--slurm-option",
            "account=paper",
            "--tracking-uri",
            server,
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "Slurm did not take the sweep's array job: sbatch: error: invalid partition specified: big" in result.output
    script = kept.read_text()
    for option in (
        "--partition=big",
        "--time=30",
        "--cpus-per-task=4",
        "--gpus-per-node=1",
        "--account=paper",
        "--job-name=initmem-refused",
        "--array=0-1",
    ):
        assert f"#SBATCH {option}" in script, option
    runs = children(server, "refused")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FAILED"}
    assert all(r.data.tags["failure_reason"].startswith("submission failed: sbatch: error") for r in runs)


def test_remote_executors_refuse_a_store_their_workers_cannot_reach(tmp_path):
    database = tmp_path / "mlflow.db"
    for executor in (["--executor", "ray"], ["--executor", "slurm", "--slurm-local"]):
        result = runner.invoke(
            app, ["sweep", *LONE, *SMALL_CELL_ARGS, *executor, "--tracking-uri", f"sqlite:///{database}"]
        )
        assert result.exit_code == 2, result.output
        assert (
            f"--executor {executor[1]} runs cells on other machines, which cannot write to sqlite:///" in result.output
        )
        assert "mlflow server" in result.output and "docs/distributed.md" in result.output
    assert not database.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ray-address", "auto"], "--ray-address is for --executor ray, not local"),
        (["--executor", "ray", "--workers", "2"], "--workers is for --executor local, not ray"),
        (["--executor", "ray", "--slurm-time", "30"], "--slurm-time is for --executor slurm, not ray"),
        (["--executor", "slurm", "--slurm-local", "--gpus-per-cell", "0.3"], "Slurm allocates whole GPUs"),
        (["--executor", "slurm", "--slurm-local", "--gpus-per-cell", "1.5"], "or 1/k of one to share it"),
        (["--executor", "slurm"], "sbatch and srun are not on this machine's PATH"),
        (["--executor", "slurm", "--slurm-local", "--slurm-option", "mem"], "--slurm-option 'mem': expected KEY=VALUE"),
        (["--executor", "dask"], "no executor named 'dask' is registered; valid executors: local, ray, slurm"),
    ],
)
def test_executor_options_are_checked_before_anything_runs(args, message, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here, whatever this machine has
    result = runner.invoke(app, ["sweep", *SMALL_CELL_ARGS, *args, "--dry-run"])
    assert result.exit_code == 2, result.output
    assert message in result.output


def open_cell(uri: str, config: RunConfig) -> str:
    """A child run as the sweep leaves it for a remote worker: SCHEDULED, its config logged."""
    from initmem_core.sweep.executor import CellOutcome
    from initmem_core.sweep.identity import GridIdentity
    from initmem_core.sweep.launch import NoSweepProgress, _Sweep

    sweep = _Sweep("unit", uri, "initmem", NoSweepProgress(), None, GridIdentity.of([config]))
    return sweep.submit(CellOutcome(config, "all", "PENDING", ""), scheduled=True).cell.run_id


def test_an_attempt_after_a_lost_one_writes_no_step_twice(server):
    """Without a checkpoint to resume from, the new attempt trains from the start and logs only
    the steps the run does not hold; params it holds are not logged again."""
    from mlflow.entities import Metric

    config = RunConfig(
        data="digits", arch="resnet20", epochs=2, train_size=64, batch_size=32, threads=1, checkpoint_every=0, sigma=0.7
    )
    run_id = open_cell(server, config)
    client = mlflow_client(server)
    client.log_batch(run_id, metrics=[Metric("train_loss", 99.0, 0, step) for step in (0, 1)], params=[], tags=[])
    client.set_tag(run_id, "initmem.attempts", "1")  # as a worker that died after epoch 1 leaves it
    assert run_remote_cell(CellTask(config, run_id, server, "initmem")) == ("FINISHED", "")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["initmem.attempts"] == "2"
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, "train_loss"))[:2] == [
        (0, 99.0),
        (1, 99.0),
    ]
    for key in ("train_loss", "val_acc", "weight_norm"):
        assert sorted(m.step for m in client.get_metric_history(run_id, key)) == [0, 1, 2], key
    assert run.data.params["resolved_device"] == "cpu"


def test_an_attempt_after_a_finished_one_does_nothing(server):
    config = RunConfig(data="digits", arch="resnet20", epochs=1, train_size=64, batch_size=32, sigma=0.9)
    run_id = open_cell(server, config)
    client = mlflow_client(server)
    client.set_terminated(run_id, "FINISHED")  # as a worker that died just after ending its run leaves it
    assert run_remote_cell(CellTask(config, run_id, server, "initmem")) == ("FINISHED", "")
    run = client.get_run(run_id)
    assert "initmem.attempts" not in run.data.tags and not run.data.metrics


class Bar:
    def __init__(self):
        self.starts, self.steps, self.epochs = 0, 0, []

    def start(self, epochs, steps_per_epoch):
        self.starts += 1

    def advance(self, steps):
        self.steps += steps

    def epoch_done(self, epoch, metrics):
        self.epochs.append(epoch)


def test_a_retried_cell_moves_its_bar_neither_back_nor_twice():
    bar = Bar()
    progress = RetriedCellProgress(bar)
    progress.start(2, 10)
    progress.advance(6)
    progress.epoch_done(1, {})
    progress.start(2, 10)  # the worker died; the new attempt resumes from the checkpoint at epoch 1
    progress.advance(5)
    assert (bar.starts, bar.steps) == (1, 6)
    progress.advance(3)
    assert bar.steps == 8


def test_a_progress_file_hands_over_whole_lines_only(tmp_path):
    path = tmp_path / "cell.jsonl"
    writer, reader = ProgressFile(path), ProgressFile(path)
    assert reader.take() == []
    writer.put(["run", "advance", [3]])
    with open(path, "a") as handle:
        handle.write('["run", "epoch_do')  # a line the job is still writing
    assert reader.take() == [["run", "advance", [3]]]
    with open(path, "a") as handle:
        handle.write('ne", [1, {"val_acc": 0.5}]]\n')
    assert reader.take() == [["run", "epoch_done", [1, {"val_acc": 0.5}]]]
