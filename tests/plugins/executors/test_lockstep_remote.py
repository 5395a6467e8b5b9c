"""Lockstep sweeps on the Ray and Slurm executors (plugins/executors/lockstep.py, remote_cell.py):
each fused sigma group goes out as one task with one cell's resources, the cells that cannot fuse
as plain remote cells with the local executor's lines, and a fused job run again after its worker
was lost (Ray) or its job preempted (Slurm) leaves the cells an earlier attempt ended and resumes
the others from their checkpoints, to the local fused sweep's child runs.

The planning is tested with Ray's submission and submitit replaced (no worker starts); the whole
sweeps, one per executor, against the local fused sweep: Slurm through submitit's local executor
here, Ray on a head started here, which runs only in a loopback-only network namespace
(test_executors_isolated.py runs it there, with the other Ray tests)."""

from __future__ import annotations

import importlib.util
import os
import signal
import time
import types
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.config import RunConfig
from initmem_core.errors import RunWarning
from initmem_core.plugin_system.loader import get_registry, load_registry, set_registry
from initmem_core.sweep.executor import CellOutcome, Job
from initmem_core.vocabulary import FAILED, FINISHED, LOCKSTEP_TAG
from tests.support import pausing_plugin
from tests.support.cli_processes import SMALL_CELL_ARGS, children, history, mlflow_client
from tests.support.network_isolation import loopback_only

runner = CliRunner(env={"COLUMNS": "200"})

CELL = dict(data="digits", arch="resnet20", epochs=2, train_size=128, batch_size=32, eval_batch_size=512, threads=1)
MUON = "--opt muon does not declare an element-wise update"


def has(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except ImportError:  # a finder that refuses it (tests/blocked_imports.py)
        return False


needs_ray = pytest.mark.skipif(not has("ray"), reason="could not import 'ray'")
needs_submitit = pytest.mark.skipif(not has("submitit"), reason="could not import 'submitit'")


class FakeSweep:
    """What a sweep offers an executor, with the built-in registry: the cells it was handed, closed."""

    uri, experiment, name = "http://127.0.0.1:5000", "initmem", "unit"

    def __init__(self):
        self.registry = get_registry()
        self.submitted, self.closed = [], {}

    def submit(self, cell, scheduled=False):
        self.submitted.append(cell.run_id)
        return Job(cell, None, None)

    def close(self, job, error=""):
        self.closed[job.cell.run_id] = error

    def interrupt(self, jobs):
        pass


def grid() -> list[CellOutcome]:
    """Two seeds of three sigmas that fuse (a job per seed), and two Muon cells that cannot."""
    configs = [RunConfig(**CELL, sigma=s, seed=seed) for seed in (0, 1) for s in (0.5, 1.0, 2.0)]
    configs += [RunConfig(**CELL, sigma=s, opt="muon") for s in (0.5, 1.0)]
    return [CellOutcome(config, "all", "PENDING", f"r{index}") for index, config in enumerate(configs)]


def said(caught) -> list[str]:
    """The lockstep lines an executor warned."""
    return [str(w.message) for w in caught if issubclass(w.category, RunWarning)]


def printed(output: str) -> list[str]:
    """The lockstep lines a sweep printed (its warnings, one line each)."""
    return [line.removeprefix("Warning: ") for line in output.splitlines() if line.startswith("Warning: lockstep:")]


# -- the executors' planning: one task per fused job, with one cell's resources --------------------


@needs_ray
def test_ray_submits_each_fused_job_as_one_task_with_one_cells_request(monkeypatch):
    import ray
    from ray.remote_function import RemoteFunction

    from initmem_plugins.executors import ray_executor
    from initmem_plugins.executors.ray_executor import RayExecutor

    submitted = []

    def submit(self, args=None, kwargs=None, **options):
        submitted.append((options, args))
        return len(submitted) - 1

    monkeypatch.setattr(ray_executor, "wait_for_server", lambda uri: None)
    monkeypatch.setattr(RemoteFunction, "_remote", submit)
    monkeypatch.setattr(ray, "wait", lambda refs, num_returns, timeout: (list(refs), []))
    # each task returns its cells' outcomes, in order: a cell is closed with its own
    monkeypatch.setattr(ray, "get", lambda ref: [(FINISHED, f"ran {task.run_id}") for task in submitted[ref][1][0]])
    sweep, cells = FakeSweep(), grid()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RayExecutor(cpus_per_cell=2, lockstep="on")._run_tasks(cells, sweep, events=types.SimpleNamespace(size=int))
    assert said(caught) == ["lockstep: 6 cells fuse into 2 job(s) of 3, 3", f"lockstep: 2 cell(s) run alone: {MUON}"]
    jobs = [[task.run_id for task in args[0]] for _, args in submitted]
    assert sorted(jobs) == [["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6"], ["r7"]]
    for options, args in submitted:  # a fused job asks for what one cell asks for
        assert (options["num_cpus"], options["num_gpus"], options["max_retries"]) == (2, 0, 3)
        assert all(task.config.threads == 1 and task.config.device == "cpu" for task in args[0])
    fused = [options["name"] for options, args in submitted if len(args[0]) > 1]
    assert all(name.startswith("initmem lockstep ") and name.endswith(" +2") for name in fused)
    assert sweep.closed == {f"r{index}": f"ran r{index}" for index in range(8)}


class FakeSlurmJob:
    def __init__(self, number, results):
        self.job_id, self.results, self.state = str(number), results, "COMPLETED"

    def done(self):
        return True

    def result(self):
        return self.results


class FakeSubmitit:
    """submitit's executor as the sweep uses it: what each array task was given; each cell's
    result says which task ran it."""

    def __init__(self):
        self.submitted = []

    def batch(self):
        import contextlib

        return contextlib.nullcontext()

    def submit(self, function, tasks, progress_paths):
        self.submitted.append((function, tasks, progress_paths))
        number = len(self.submitted) - 1
        return FakeSlurmJob(number, [(FINISHED, f"task {number}") for _ in tasks])


@needs_submitit
@pytest.mark.parametrize("gpus", [0, 0.5])
def test_slurm_submits_each_fused_job_as_one_array_task_and_packs_jobs_sharing_a_gpu(tmp_path, monkeypatch, gpus):
    from initmem_plugins.executors import slurm

    monkeypatch.setattr(slurm, "POLL_S", 0)
    executor = slurm.SlurmExecutor(tmp_path, cpus_per_cell=2, gpus_per_cell=gpus, local=True, lockstep="on")
    fake = FakeSubmitit()
    monkeypatch.setattr(executor, "_submitit", lambda name: fake)
    sweep, cells = FakeSweep(), grid()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        executor.run(cells, sweep)
    assert said(caught) == ["lockstep: 6 cells fuse into 2 job(s) of 3, 3", f"lockstep: 2 cell(s) run alone: {MUON}"]
    tasks = [([task.run_id for task in given], function.sizes) for function, given, _ in fake.submitted]
    if gpus == 0:  # a task per job: the fused ones with a cell's CPUs (the array's one request)
        assert sorted(tasks) == [(["r0", "r1", "r2"], [3]), (["r3", "r4", "r5"], [3]), (["r6"], [1]), (["r7"], [1])]
    else:  # two jobs share a task's GPU, side by side, whichever they are
        assert sorted(tasks) == [(["r0", "r1", "r2", "r3", "r4", "r5"], [3, 3]), (["r6", "r7"], [1, 1])]
    parameters = slurm.SlurmExecutor._submitit(executor, "unit")._executor.parameters
    assert (parameters["cpus_per_task"], parameters["gpus_per_node"]) == (2 * executor.packed, 1 if gpus else 0)
    for _, given, paths in fake.submitted:  # each cell its own progress file
        assert [Path(path).name for path in paths] == [f"{task.run_id}.jsonl" for task in given]
    assert set(sweep.closed) == {f"r{index}" for index in range(8)}
    assert all(error.startswith("task ") for error in sweep.closed.values())


@needs_submitit
def test_a_slurm_task_runs_its_fused_jobs_whole_and_side_by_side(monkeypatch):
    from initmem_plugins.executors import slurm

    ran = []
    monkeypatch.setattr(
        slurm, "run_slurm_job", lambda tasks, paths: ran.append((tasks, paths)) or [("F", t) for t in tasks]
    )
    monkeypatch.setattr(
        slurm, "run_side_by_side", lambda jobs: ran.append(jobs) or [[("S", t) for t in j] for j, _ in jobs]
    )
    assert slurm.SlurmTask([3])(["a", "b", "c"], ["pa", "pb", "pc"]) == [("F", "a"), ("F", "b"), ("F", "c")]
    assert ran.pop() == (["a", "b", "c"], ["pa", "pb", "pc"])  # one fused job, in this process
    assert slurm.SlurmTask([2, 1])(["a", "b", "c"], ["pa", "pb", "pc"]) == [("S", "a"), ("S", "b"), ("S", "c")]
    assert ran.pop() == [(["a", "b"], ["pa", "pb"]), (["c"], ["pc"])]  # a fused job and a cell, side by side
    assert slurm.SlurmTask()(["a", "b"], ["pa", "pb"]) == [("S", "a"), ("S", "b")]  # no sizes: a cell each
    assert ran.pop() == [(["a"], ["pa"]), (["b"], ["pb"])]


@needs_ray
def test_auto_fuses_on_a_remote_executor_by_its_request_not_this_machine(monkeypatch):
    """``auto`` fuses CPU cells only (where it was measured to pay): a remote cell's hardware is
    what it asks for, whatever GPU the launching machine has."""
    from initmem_plugins.executors import lockstep
    from initmem_plugins.executors.ray_executor import RayExecutor

    monkeypatch.setattr(lockstep, "_has_gpu", lambda: True)  # this machine has one
    configs = [RunConfig(**CELL, sigma=s) for s in (0.5, 1.0, 2.0)]
    on_cpus = RayExecutor(lockstep="auto").dry_run_lines(configs, 600.0)
    assert on_cpus[0] == "lockstep: 3 cells fuse into 1 job(s) of 3"
    # GPU cells: auto, the default, fuses none and says nothing of it; on fuses them anyway
    assert RayExecutor(gpus_per_cell=1, lockstep="auto").dry_run_lines(configs, 600.0) == []
    on_gpus = RayExecutor(gpus_per_cell=1, lockstep="on").dry_run_lines(configs, 600.0)
    assert on_gpus[0] == "lockstep: 3 cells fuse into 1 job(s) of 3"
    from initmem_core.plugin_system.loader import get_registry

    [reason] = lockstep.plan_lockstep(configs, get_registry(), "auto", config_of=lambda c: c, gpu=True).reasons
    assert reason == "auto fuses on the CPU only (a GPU's product path is not measured yet: --lockstep on)"


# -- a fused job run again ------------------------------------------------------------------------


class Writer:
    """A cell's writer as ``open_attempt`` leaves it: ended by an earlier attempt or not."""

    def __init__(self, task, ended=None):
        self.task, self.finished, self.outcome = task, ended is not None, ended


def test_a_fused_job_run_again_leaves_ended_cells_and_regroups_the_rest_by_checkpoint(monkeypatch):
    """An earlier attempt finished one cell and saw one diverge; two stand at epoch 1's
    checkpoint and train fused again; one has none (it starts over, alone)."""
    from initmem_plugins.executors import lockstep_job, remote_cell
    from initmem_plugins.executors.remote_cell import CellTask

    tasks = [
        CellTask(RunConfig(**CELL, sigma=s), f"r{i}", "sqlite:///x.db", "e") for i, s in enumerate((0.5, 1, 2, 3, 4))
    ]
    ended = {"r0": (FINISHED, ""), "r1": (FAILED, "Diverged: the training loss")}
    points = {"r2": (1, 0), "r3": None, "r4": (1, 0)}
    monkeypatch.setattr(remote_cell, "quiet_run_links", lambda: None)
    monkeypatch.setattr(remote_cell, "open_attempt", lambda task: Writer(task, ended.get(task.run_id)))
    monkeypatch.setattr(remote_cell, "resume_point", lambda task, writer: points[task.run_id])
    calls = []

    def lone(config, tracker, progress, resume):
        calls.append(("lone", [tracker.task.run_id], [resume], [progress]))
        return (FINISHED, "lone")

    def fused(configs, trackers, progresses, resume):
        calls.append(("fused", [t.task.run_id for t in trackers], resume, progresses))
        return [(FINISHED, "fused")] * len(configs)

    monkeypatch.setattr(remote_cell, "run_cell", lone)
    monkeypatch.setattr(lockstep_job, "run_lockstep", fused)
    outcomes = remote_cell.run_remote_job(tasks, ["p0", "p1", "p2", "p3", "p4"])
    assert outcomes == [ended["r0"], ended["r1"], (FINISHED, "fused"), (FINISHED, "lone"), (FINISHED, "fused")]
    assert sorted(calls) == [("fused", ["r2", "r4"], [True, True], ["p2", "p4"]), ("lone", ["r3"], [False], ["p3"])]


# -- whole sweeps and a lost worker, against the local fused sweep ---------------------------------

GRID = ["--opt", "pausing-sgd", "--sigma", "0.5,1,2", "--seed", "0", "--device", "cpu"]
PAUSE_S = 240  # how long a test waits for the fused job to pause


def artifacts(client, run_id: str, path: str = "") -> set[str]:
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def cell_record(uri: str, run) -> dict:
    """What a fused cell's child run holds that does not name where or when it ran (its
    checkpoint folder is the sweep's own): every metric at every step, exactly (one thread on the
    CPU: the same config computes the same numbers)."""
    return {
        "status": run.info.status,
        "tags": {key: run.data.tags.get(key) for key in (LOCKSTEP_TAG, "stop_reason", "config_hash")},
        "params": {key: value for key, value in run.data.params.items() if key != "checkpoint_dir"},
        "metrics": {key: history(uri, run.info.run_id, key) for key in run.data.metrics},
        "artifacts": artifacts(mlflow_client(uri), run.info.run_id),
    }


def records(uri: str, sweep: str) -> dict:
    return {run.data.tags["config_hash"]: (run.info.run_name, cell_record(uri, run)) for run in children(uri, sweep)}


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    """``pausing_plugin`` installed as pip would, on this process's path too (a spawned worker
    imports with it, not with PYTHONPATH), so that every process of these tests has the same."""
    site = pausing_plugin.install(tmp_path_factory.mktemp("site"))
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(site))
        yield site


@pytest.fixture(scope="module")
def fused_reference(tmp_path_factory, store_in, plugin_site):
    """The grid fused on the local executor, in this process: what Ray and Slurm must reproduce."""
    folder = tmp_path_factory.mktemp("reference")
    uri = store_in(folder)
    set_registry(load_registry())
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(pausing_plugin.PAUSE_ENV, raising=False)  # nothing pauses here
        try:
            result = runner.invoke(
                app,
                [
                    *("sweep", *SMALL_CELL_ARGS, *GRID, "--name", "reference", "--lockstep", "on"),
                    *("--tracking-uri", uri, "--out", str(folder / "out"), "--checkpoint-dir", str(folder / "ckpt")),
                ],
            )
        finally:
            set_registry(None)
    assert result.exit_code == 0, result.output
    lines = printed(result.output)
    assert lines == ["lockstep: 3 cells fuse into 1 job(s) of 3"]
    found = records(uri, "reference")
    assert len(found) == 3 and {record["tags"][LOCKSTEP_TAG] for _, record in found.values()} == {"3"}
    return lines, found


@pytest.fixture
def pausing(monkeypatch, tmp_path, plugin_site):
    """Every process started from here loads ``pausing-sgd`` as a plugin, as this one does; the
    first cell to reach step 5 pauses. Returns the file it writes its process id into."""
    set_registry(load_registry())
    marker = tmp_path / "paused.pid"
    path = os.pathsep.join(filter(None, [str(plugin_site), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv(pausing_plugin.PAUSE_ENV, str(marker))
    monkeypatch.delenv("INITMEM_LOAD_PLUGINS", raising=False)
    yield marker
    set_registry(None)


def paused_pid(marker: Path, running=lambda: True) -> int | None:
    """The process id of the job that paused; ``None`` if it never did (within ``PAUSE_S``, or
    while ``running``)."""
    deadline = time.monotonic() + PAUSE_S
    while time.monotonic() < deadline and running():
        if marker.exists() and marker.read_text():
            return int(marker.read_text())
        time.sleep(0.05)
    return None


def progress_events(path: Path) -> list:
    from initmem_plugins.executors.slurm import ProgressFile

    return [call_args for _, *call_args in ProgressFile(path).take()]


def resumed_from_epoch_1(events: list) -> bool:
    """A second attempt's progress started at epoch 1's checkpoint: its 4 steps at once."""
    starts = [index for index, (call, _) in enumerate(events) if call == "start"]
    return len(starts) == 2 and events[starts[1] + 1] == ["advance", [4]]


def assert_the_reference(uri: str, sweep: str, reference, names: bool = True) -> list:
    """Each cell's child run is the local fused sweep's: once, with the same name, params,
    lockstep tag, every metric at every step, artifacts, FINISHED."""
    found = records(uri, sweep)
    assert found.keys() == reference.keys()
    for config_hash, (name, record) in found.items():
        expected_name, expected = reference[config_hash]
        assert record == expected, name
        assert name == expected_name or not names
    return children(uri, sweep)


@pytest.fixture(scope="module")
def server(tmp_path_factory, _empty_store):
    import shutil

    from tests.support.local_services import mlflow_server

    folder = tmp_path_factory.mktemp("server")
    shutil.copy(_empty_store, folder / "server.db")  # already migrated: the server starts sooner
    with mlflow_server(folder / "server.db", folder / "artifacts") as url:
        yield url


def remote_sweep(name: str, executor: list[str], server: str, marker: Path, act, tmp_path: Path):
    """The grid fused (``--lockstep on``) on ``executor`` into ``server``, ``act(pid)`` done to the
    job as it pauses after epoch 1's checkpoint: the result, and the process ids acted on."""
    import threading

    acted: list[int] = []

    def watch() -> None:
        pid = paused_pid(marker)
        if pid is not None:
            act(pid)
            acted.append(pid)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    result = runner.invoke(
        app,
        [
            *("sweep", *SMALL_CELL_ARGS, *GRID, "--name", name, "--lockstep", "on", *executor),
            *("--tracking-uri", server, "--out", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ckpt")),
        ],
    )
    thread.join(timeout=1)
    return result, acted


def assert_ran_as_the_local_fused_sweep(result, acted: list[int], server: str, name: str, fused_reference) -> list:
    """The sweep ran each cell into its own child run as the local fused sweep did, its fused job
    twice (the first attempt lost)."""
    assert result.exit_code == 0, result.output
    assert acted, "the fused job never paused, so nothing was done to it"
    lines, reference = fused_reference
    assert printed(result.output) == lines  # what the local executor says of the same cells
    assert "3 cells: 3 ran, 0 skipped (ended before: finished or diverged), 0 failed" in result.output
    runs = assert_the_reference(server, name, reference)
    assert [run.data.tags["initmem.attempts"] for run in runs] == ["2"] * 3  # run again as a whole
    return runs


@needs_ray
@pytest.mark.slow(seconds=90)
@pytest.mark.skipif(not loopback_only(), reason="Ray needs a loopback-only network namespace (test_executors_isolated)")
def test_a_ray_lockstep_sweep_is_the_local_fused_sweep_and_its_killed_worker_is_run_again(
    fused_reference, pausing, server, monkeypatch, tmp_path
):
    """``--executor ray --lockstep on`` on a Ray head here: one task for the fused job, whose
    worker is killed (SIGKILL) as it pauses after epoch 1's checkpoint; Ray runs it again, each
    cell resumes, fused again, and the sweep's child runs are the local fused sweep's."""
    from initmem_plugins.executors import remote_cell
    from tests.support.local_services import ray_head

    bars: list[list] = []  # each cell's progress as the sweep replays it from Ray's queue

    class Recorded(remote_cell.RetriedCellProgress):
        def __init__(self, bar):
            super().__init__(bar)
            self.events: list = []
            bars.append(self.events)

        def start(self, epochs, steps_per_epoch):
            self.events.append(["start", [epochs, steps_per_epoch]])
            super().start(epochs, steps_per_epoch)

        def advance(self, steps):
            self.events.append(["advance", [steps]])
            super().advance(steps)

    monkeypatch.setattr(remote_cell, "RetriedCellProgress", Recorded)  # submit_remote's
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a test head on this machine, for this process only
    with ray_head(2, dict(os.environ)) as address:
        executor = ["--executor", "ray", "--ray-address", address]
        result, killed = remote_sweep(
            "on-ray", executor, server, pausing, lambda pid: os.kill(pid, signal.SIGKILL), tmp_path
        )
    runs = assert_ran_as_the_local_fused_sweep(result, killed, server, "on-ray", fused_reference)
    assert all(not run.data.tags["initmem.worker"].endswith(f":{killed[0]}") for run in runs)  # another worker
    assert len(bars) == 3 and all(resumed_from_epoch_1(events) for events in bars), bars


@needs_submitit
@pytest.mark.slow(seconds=60)
def test_a_slurm_lockstep_sweep_is_the_local_fused_sweep_and_its_preempted_job_resumes(
    fused_reference, pausing, server, tmp_path
):
    """``--executor slurm --lockstep on`` through submitit's local executor: one array task for
    the fused job, preempted (Slurm's SIGUSR2 warning) as it pauses after epoch 1's checkpoint,
    requeued, each cell resumed, and the sweep's child runs are the local fused sweep's."""
    executor = ["--executor", "slurm", "--slurm-local"]
    preempt = lambda pid: os.kill(pid, signal.SIGUSR2)  # noqa: E731
    result, signalled = remote_sweep("on-slurm", executor, server, pausing, preempt, tmp_path)
    runs = assert_ran_as_the_local_fused_sweep(result, signalled, server, "on-slurm", fused_reference)
    tasks = [folder for folder in (tmp_path / "out/slurm").iterdir() if folder.name.isdigit()]
    assert len(tasks) == 1  # one array task for the fused job
    for run in runs:
        assert resumed_from_epoch_1(progress_events(tmp_path / "out/slurm/progress" / f"{run.info.run_id}.jsonl"))


@needs_ray
@needs_submitit
def test_the_dry_run_says_which_cells_fuse_on_ray_and_slurm(tmp_path):
    cells = ["--data", "digits", "--arch", "resnet20", "--batch-size", "32", "--threads", "1"]
    grid = [*cells, "--sigma", "0.5,1,2,3", "--seed", "0,1", "--lockstep-max", "3"]
    for executor in (["--executor", "ray"], ["--executor", "slurm", "--slurm-local"]):
        result = runner.invoke(
            app,
            [
                "sweep",
                *grid,
                *executor,
                "--lockstep",
                "on",
                "--dry-run",
                "--tracking-uri",
                f"sqlite:///{tmp_path}/m.db",
            ],
        )
        assert result.exit_code == 0, result.output
        lines = [line for line in result.output.splitlines() if line.startswith("lockstep:")]
        assert lines[0] == "lockstep: 8 cells fuse into 4 job(s) of 2, 2, 2, 2", executor
        assert lines[1].startswith("lockstep: 4 job(s); estimated time "), executor
    assert not (tmp_path / "m.db").exists()
