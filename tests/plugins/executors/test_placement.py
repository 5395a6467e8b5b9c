"""Where a sweep's cells run on GPUs, tested without one: one GPU per worker process, chosen
before CUDA starts there (local workers), one cell per GPU worker process seeing only its GPUs
(Ray), several cells sharing one GPU in one task (Slurm). The GPU count and Ray's assignment are
faked; every test name says gpu or cuda, so that ``pytest -k "cuda or gpu"`` selects them."""

from __future__ import annotations

import collections
import os
import signal
import sys
import types
from pathlib import Path

import pytest

from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.sweep.executor import CellOutcome, Job
from initmem_plugins.executors import placement
from initmem_plugins.executors.local import LocalExecutor
from initmem_plugins.executors.placement import CUBLAS_WORKSPACE, DETERMINISTIC_WORKSPACE, VISIBLE_DEVICES
from initmem_plugins.executors.remote_cell import CellTask

CONFIG = RunConfig(data="digits", arch="resnet20", epochs=1, train_size=64, batch_size=32)


@pytest.fixture
def clean_gpu_env(monkeypatch):
    """Neither variable set, and both restored after the test (``pin_process`` writes os.environ)."""
    for name in (VISIBLE_DEVICES, CUBLAS_WORKSPACE):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


def cell(**changes) -> CellOutcome:
    return CellOutcome(CONFIG.replace(**changes), "all", "PENDING", f"run-{len(changes)}-{sorted(changes.items())}")


# --- placement: which GPU each local worker keeps ------------------------------------------------


def test_gpu_workers_up_to_the_gpu_count_each_get_their_own_gpu(clean_gpu_env):
    gpus = [str(index) for index in range(8)]
    environments = placement.worker_environments(8, gpus)
    assert [env[VISIBLE_DEVICES] for env in environments] == gpus
    assert [env[VISIBLE_DEVICES] for env in placement.worker_environments(3, gpus)] == ["0", "1", "2"]


@pytest.mark.parametrize("workers, gpus", [(5, 2), (8, 3), (16, 8), (3, 1)])
def test_more_workers_than_gpus_share_each_gpu_evenly(clean_gpu_env, workers, gpus):
    names = [str(index) for index in range(gpus)]
    counts = collections.Counter(env[VISIBLE_DEVICES] for env in placement.worker_environments(workers, names))
    assert set(counts) == set(names)  # every GPU is used
    assert max(counts.values()) - min(counts.values()) <= 1  # N/GPUs cells per GPU, at most one more
    assert all("," not in env[VISIBLE_DEVICES] for env in placement.worker_environments(workers, names))


def test_without_a_gpu_no_worker_gets_cuda_visible_devices(clean_gpu_env):
    for env in placement.worker_environments(3, []):
        assert VISIBLE_DEVICES not in env
        assert env[CUBLAS_WORKSPACE] == DETERMINISTIC_WORKSPACE


def test_gpu_workers_get_the_deterministic_cublas_workspace_unless_the_user_set_one(clean_gpu_env):
    assert all(env[CUBLAS_WORKSPACE] == ":4096:8" for env in placement.worker_environments(2, ["0", "1"]))
    clean_gpu_env.setenv(CUBLAS_WORKSPACE, ":16:8")
    assert all(CUBLAS_WORKSPACE not in env for env in placement.worker_environments(2, ["0", "1"]))


def test_visible_gpus_follow_a_users_cuda_visible_devices(clean_gpu_env):
    clean_gpu_env.setattr(placement, "installed_gpus", lambda: 8)  # what the driver has is not what the user allows
    for value, expected in [
        ("2,5", ["2", "5"]),
        ("", []),
        ("-1", []),
        ("1,-1,0", ["1"]),
        (" 3 , 4", ["3", "4"]),
        ("GPU-6e1b,MIG-0c2f", ["GPU-6e1b", "MIG-0c2f"]),
    ]:
        clean_gpu_env.setenv(VISIBLE_DEVICES, value)
        assert placement.visible_gpus() == expected, value
    clean_gpu_env.setenv(VISIBLE_DEVICES, "4,6")  # slot i keeps the user's i-th GPU, as CUDA names it
    environments = placement.worker_environments(3, placement.visible_gpus())
    assert [env[VISIBLE_DEVICES] for env in environments] == ["4", "6", "4"]


def test_gpu_count_without_cuda_visible_devices_comes_from_the_driver_without_torch(clean_gpu_env, tmp_path):
    driver = tmp_path / "gpus"
    for bus in ("0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0"):
        (driver / bus).mkdir(parents=True)
    clean_gpu_env.setattr(placement, "NVIDIA_GPUS", driver)
    assert placement.installed_gpus() == 3
    assert placement.visible_gpus() == ["0", "1", "2"]
    clean_gpu_env.setattr(placement, "NVIDIA_GPUS", tmp_path / "no-driver")
    clean_gpu_env.setenv("PATH", str(tmp_path))  # and no nvidia-smi
    assert placement.installed_gpus() == 0 and placement.visible_gpus() == []


@pytest.mark.slow  # runs a stand-in nvidia-smi
def test_gpu_count_falls_back_to_nvidia_smi(clean_gpu_env, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\n[ "$1" = -L ] || exit 9\n'
        "echo 'GPU 0: NVIDIA H200 (UUID: GPU-aaaa)'\n"
        "echo '  MIG 1g.18gb Device 0: (UUID: MIG-bbbb)'\n"
        "echo 'GPU 1: NVIDIA H200 (UUID: GPU-cccc)'\n"
    )
    smi.chmod(0o755)
    clean_gpu_env.setattr(placement, "NVIDIA_GPUS", tmp_path / "no-driver")
    clean_gpu_env.setenv("PATH", str(tmp_path))
    assert placement.installed_gpus() == 2


def test_a_gpu_is_pinned_only_before_cuda_starts(clean_gpu_env):
    started = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    clean_gpu_env.setitem(sys.modules, "torch", started)
    with pytest.raises(RuntimeError, match="CUDA already started"):
        placement.pin_process({VISIBLE_DEVICES: "1"})
    assert VISIBLE_DEVICES not in os.environ
    not_started = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: False))
    clean_gpu_env.setitem(sys.modules, "torch", not_started)
    placement.pin_process({VISIBLE_DEVICES: "1", CUBLAS_WORKSPACE: ":4096:8"})
    assert (os.environ[VISIBLE_DEVICES], os.environ[CUBLAS_WORKSPACE]) == ("1", ":4096:8")


class FakeSweep:
    uri, experiment, registry, name = "http://127.0.0.1:5000", "initmem", None, "unit"

    def __init__(self):
        self.closed = []

    def submit(self, cell, scheduled=False):
        return Job(cell, None, None)

    def close(self, job, error=""):
        self.closed.append((job.cell.run_id, error))

    def interrupt(self, jobs):
        pass


class FakeQueue:
    def size(self):
        return 0


# --- local executor: a user's --device ------------------------------------------------------------


@pytest.mark.slow  # starts a process
def test_local_gpu_workers_leave_a_users_device_alone(clean_gpu_env):
    from initmem_plugins.executors.local import check_devices

    executor = LocalExecutor(workers=2)
    for device in ("auto", "cpu", "cuda", "cuda:0"):
        assert executor.pin(CONFIG.replace(device=device)).device == device
    check_devices([cell(device=d) for d in ("auto", "cpu", "cuda", "cuda:0")], 2, ["0", "1"])  # all run as asked


def test_local_gpu_workers_refuse_a_cuda_index_they_cannot_see(clean_gpu_env):
    from initmem_plugins.executors.local import check_devices

    with pytest.raises(
        ConfigError,
        match=r"--device cuda:1 with --workers 2: each worker process sees one GPU of "
        r"the 2 here, as cuda:0",
    ):
        check_devices([cell(), cell(device="cuda:1")], 2, ["0", "1"])
    check_devices([cell(device="cuda:1")], 2, [])  # no GPU found, so none pinned: nothing to refuse here


class NoEvents:
    """The workers' queue, empty (picklable, as a manager's queue proxy is)."""

    def get(self, timeout=None):
        import queue

        raise queue.Empty

    get_nowait = get


class SlotPool:
    """A slot's single-worker pool that runs nothing: which configs it was handed."""

    def __init__(self):
        self.configs = []

    def submit(self, function, config, *args):
        import concurrent.futures

        self.configs.append(config)
        future = concurrent.futures.Future()
        future.set_result(("FINISHED", ""))
        return future


class SlotWorkers:
    def __init__(self, workers, gpus):
        self.gpus, self.pools, self.events = gpus, [SlotPool() for _ in range(workers)], NoEvents()
        self.staging = types.SimpleNamespace(name="/nonexistent")

    def queue_alive(self):
        return True

    def close(self):
        pass


@pytest.mark.slow  # starts a process
def test_local_cells_on_gpu_workers_keep_device_auto_and_go_to_their_slots_pool(clean_gpu_env):
    """Cells are handed to the pool of a free slot (whose worker keeps that slot's GPU), with
    their device left as it was: the worker's one visible GPU is cuda:0 there."""
    from initmem_plugins.executors import local

    clean_gpu_env.setattr(placement, "installed_gpus", lambda: 2)
    clean_gpu_env.setattr(local, "_Workers", SlotWorkers)
    executor = LocalExecutor(workers=2, lockstep="off")  # cells one by one to the slots' pools
    executor.start()
    pools = executor._started.pools
    assert executor._started.gpus == ["0", "1"]  # counted in this process, without torch
    cells = [cell(sigma=0.5), cell(sigma=1.0), cell(sigma=2.0, device="cpu")]
    sweep = FakeSweep()
    executor.run(cells, sweep)
    assert [[(c.sigma, c.device) for c in pool.configs] for pool in pools] == [
        [(0.5, "auto"), (2.0, "cpu")],
        [(1.0, "auto")],
    ]
    assert [error for _, error in sweep.closed] == ["", "", ""]


@pytest.mark.slow  # spawns worker processes
def test_local_workers_are_each_pinned_to_one_gpu_before_torch_and_keep_it_when_replaced(clean_gpu_env):
    """Three workers on two (fake) GPUs: each worker process sees its slot's GPU, set by its
    initializer before torch was imported there; the worker that replaces a dead one sees the same."""
    clean_gpu_env.setattr(placement, "installed_gpus", lambda: 2)
    executor = LocalExecutor(workers=3)
    executor.start()
    try:
        workers = executor._started
        seen = [pool.submit(os.getenv, VISIBLE_DEVICES).result(timeout=300) for pool in workers.pools]
        cublas = [pool.submit(os.getenv, CUBLAS_WORKSPACE).result(timeout=60) for pool in workers.pools]
        pid = workers.pools[1].submit(os.getpid).result(timeout=60)
        os.kill(pid, signal.SIGKILL)  # e.g. out of memory
        with pytest.raises(Exception):  # noqa: B017  (whichever error a dead worker's pool raises)
            workers.pools[1].submit(os.getpid).result(timeout=60)
        workers.replace(1)
        again = workers.pools[1].submit(os.getenv, VISIBLE_DEVICES).result(timeout=300)
        new_pid = workers.pools[1].submit(os.getpid).result(timeout=60)
    finally:
        executor.stop()
    assert seen == ["0", "1", "0"]
    assert cublas == [":4096:8"] * 3
    assert (again, new_pid != pid) == ("1", True)
    assert VISIBLE_DEVICES not in os.environ  # the sweep process itself is not pinned


# --- Ray: one cell per GPU worker process, on the GPUs Ray assigned --------------------------------


@pytest.fixture
def ray():
    return pytest.importorskip("ray")


def submitted_ray_tasks(ray, monkeypatch, gpus_per_cell: float, cells: list) -> list:
    """Run ``_run_tasks`` on real Ray remote functions with Ray's submission replaced: what each
    submission was (the function Ray would export, its options, its arguments)."""
    from ray.remote_function import RemoteFunction

    from initmem_plugins.executors import ray_executor
    from initmem_plugins.executors.ray_executor import RayExecutor

    submitted, waited = [], []
    # no server at FakeSweep.uri: the hand-out's health wait would take its full 120 s per cell
    monkeypatch.setattr(ray_executor, "wait_for_server", waited.append)

    def submit(self, args=None, kwargs=None, **options):
        submitted.append((self, options, args))
        return len(submitted)

    monkeypatch.setattr(RemoteFunction, "_remote", submit)
    monkeypatch.setattr(ray, "wait", lambda refs, num_returns, timeout: (list(refs), []))
    monkeypatch.setattr(ray, "get", lambda ref: [("FINISHED", "")])  # each cell of the task's job
    sweep = FakeSweep()
    RayExecutor(gpus_per_cell=gpus_per_cell, lockstep="off")._run_tasks(cells, sweep, FakeQueue())
    assert len(sweep.closed) == len(cells) and all(error == "" for _, error in sweep.closed)
    assert waited == [sweep.uri] * len(cells)  # each cell handed out once the server answers
    return submitted


def test_ray_gpu_cells_never_share_a_worker_process(ray, monkeypatch):
    cells = [cell(sigma=0.5), cell(sigma=2.0)]
    submitted = submitted_ray_tasks(ray, monkeypatch, 0.25, cells)
    assert len(submitted) == 2
    for function, options, args in submitted:
        # max_calls is Ray's per-function setting (it ignores one given to .options()): 1 = a new process per cell
        assert function._max_calls == 1
        assert options["num_gpus"] == 0.25 and options["max_retries"] == 3
        assert args[2] is True  # the task pins itself to the GPUs Ray assigned it
    assert [c.config.device for c in cells] == ["auto", "auto"]  # a GPU cell runs on its task's GPU


def test_ray_cpu_cells_may_reuse_workers_and_run_without_a_gpu(ray, monkeypatch):
    cells = [cell()]
    [(function, options, args)] = submitted_ray_tasks(ray, monkeypatch, 0, cells)
    assert function._max_calls == 0 and options["num_gpus"] == 0 and args[2] is False
    assert cells[0].config.device == "cpu"


def test_a_ray_gpu_task_sees_only_the_gpus_ray_assigned_it(ray, clean_gpu_env):
    from initmem_plugins.executors import ray_executor

    clean_gpu_env.setenv(VISIBLE_DEVICES, "0,1,2,3")  # what a reused or unconfigured worker may have
    clean_gpu_env.setattr(ray, "get_gpu_ids", lambda: ["2"])
    clean_gpu_env.setattr(
        ray_executor,
        "run_remote_job",
        lambda tasks, progresses: [(os.environ[VISIBLE_DEVICES], os.environ.get(CUBLAS_WORKSPACE, ""))],
    )
    tasks = [CellTask(CONFIG, "run", "http://127.0.0.1:5000", "initmem")]
    assert ray_executor._ray_job(tasks, FakeQueue(), True) == [("2", ":4096:8")]
    clean_gpu_env.setenv(VISIBLE_DEVICES, "0,1")
    clean_gpu_env.setattr(ray, "get_gpu_ids", lambda: [])
    assert ray_executor._ray_job(tasks, FakeQueue(), True)[0][0] == ""  # assigned none: sees none
    clean_gpu_env.setenv(VISIBLE_DEVICES, "0,1")
    assert ray_executor._ray_job(tasks, FakeQueue(), False)[0][0] == "0,1"  # a CPU cell (device cpu) is left alone


# --- Slurm: several cells in one GPU task --------------------------------------------------------


@pytest.fixture(autouse=True)
def _submitit_for_slurm(request):
    if "slurm" in request.node.name:
        pytest.importorskip("submitit")


def test_slurm_gpu_fractions_pack_cells_per_task():
    from initmem_plugins.executors.slurm import cells_per_task

    assert [cells_per_task(g) for g in (0, 1, 2, 0.5, 0.25, 0.125, 1 / 3, 0.333)] == [1, 1, 1, 2, 4, 8, 3, 3]
    for bad in (0.3, 0.4, 1.5):
        with pytest.raises(ConfigError, match="Slurm allocates whole GPUs"):
            cells_per_task(bad)


class FakeSlurmJob:
    def __init__(self, number, results):
        self.job_id, self.state, self.results = str(number), "COMPLETED" if results else "OUT_OF_MEMORY", results
        self.paths = types.SimpleNamespace(stderr=f"/slurm/{number}_0_log.err")

    def done(self):
        return True

    def result(self):
        if self.results is None:
            raise RuntimeError("no result")
        return self.results


class FakeSubmitit:
    """submitit's executor as the sweep uses it: what each array task was given."""

    def __init__(self, lost: set[int]):
        self.parameters, self.submitted, self.lost = {}, [], lost

    def batch(self):
        import contextlib

        return contextlib.nullcontext()

    def submit(self, function, tasks, progress_paths):
        number = len(self.submitted)
        self.submitted.append((function, tasks, progress_paths))
        results = None if number in self.lost else [("FINISHED", f"cell {task.run_id}") for task in tasks]
        return FakeSlurmJob(number, results)


def test_slurm_packs_gpu_sharing_cells_into_one_task_each_closed_with_its_own_result(tmp_path, monkeypatch):
    from initmem_plugins.executors import slurm

    monkeypatch.setattr(slurm, "POLL_S", 0)
    executor = slurm.SlurmExecutor(tmp_path, gpus_per_cell=0.5, cpus_per_cell=2, local=True, lockstep="off")
    fake = FakeSubmitit(lost={1})
    monkeypatch.setattr(executor, "_submitit", lambda name: fake)
    cells = [
        CellOutcome(CONFIG.replace(sigma=sigma), "all", "PENDING", f"r{index}")
        for index, sigma in enumerate((0.5, 1, 1.5, 2, 2.5))
    ]
    sweep = FakeSweep()
    executor.run(cells, sweep)
    assert [[task.run_id for task in tasks] for _, tasks, _ in fake.submitted] == [["r0", "r1"], ["r2", "r3"], ["r4"]]
    assert all(isinstance(function, slurm.SlurmTask) for function, _, _ in fake.submitted)  # requeued as a whole
    assert [Path(p).name for p in fake.submitted[0][2]] == ["r0.jsonl", "r1.jsonl"]  # each cell its own progress
    assert all(
        task.config.device == "auto" and task.config.threads == 2 for _, tasks, _ in fake.submitted for task in tasks
    )  # each cell on the task's GPU, with its own CPUs
    closed = dict(sweep.closed)
    assert (closed["r0"], closed["r1"], closed["r4"]) == ("cell r0", "cell r1", "cell r4")
    assert (
        closed["r2"] == closed["r3"] == ("Slurm job 1 ended without a result (OUT_OF_MEMORY); see /slurm/1_0_log.err")
    )


def test_slurm_gpu_task_asks_for_one_gpu_and_the_cpus_of_all_its_cells(tmp_path):
    from initmem_plugins.executors.slurm import SlurmExecutor

    executor = SlurmExecutor(tmp_path, gpus_per_cell=0.25, cpus_per_cell=3, local=True, lockstep="off")
    parameters = executor._submitit("sweep")._executor.parameters
    assert (parameters["gpus_per_node"], parameters["cpus_per_task"]) == (1, 12)
    whole = SlurmExecutor(tmp_path, gpus_per_cell=2, cpus_per_cell=3, local=True)
    whole = whole._submitit("sweep")._executor.parameters
    assert (whole["gpus_per_node"], whole["cpus_per_task"]) == (2, 3)
