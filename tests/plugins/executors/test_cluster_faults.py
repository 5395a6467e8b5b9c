"""What the cluster chaos soak (faults/cluster.py) found, reproduced without it:
against fakes of Ray's objects (no Ray instance is started), and one tiny sweep."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")


class UnavailableQueue:
    """A Ray queue whose actor's node was just lost: every call raises as Ray's does then."""

    def __init__(self):
        from ray.exceptions import ActorUnavailableError

        self.error = ActorUnavailableError("The actor is temporarily unavailable: RpcError", b"\0" * 16)

    def size(self):
        raise self.error

    def get_nowait_batch(self, count):
        raise self.error

    def put(self, item, block=True, timeout=None):
        raise self.error


def test_a_lost_progress_queue_neither_ends_the_sweep_nor_fails_a_cell():
    """The soak killed the node holding the progress queue's actor: the sweep's next look at the
    queue raised ActorUnavailableError and the sweep ended with a traceback. Progress is for the
    display only: the sweep skips it, and a cell's progress event is dropped."""
    from initmem_plugins.executors.ray_executor import LossyEvents, _drain

    queue = UnavailableQueue()
    _drain(queue, {})  # before: ActorUnavailableError
    LossyEvents(queue).put(("run", "advance", (3,)))  # before (the task's put): the cell raised


def test_progress_events_still_reach_their_cells():
    from initmem_plugins.executors.ray_executor import LossyEvents, _drain

    class Queue:
        def __init__(self):
            self.items = []

        def put(self, item):
            self.items.append(item)

        def size(self):
            return len(self.items)

        def get_nowait_batch(self, count):
            batch, self.items = self.items[:count], self.items[count:]
            return batch

    class Bar:
        def __init__(self):
            self.steps = 0

        def advance(self, steps):
            self.steps += steps

    class Job:
        progress = Bar()

    queue, job = Queue(), Job()
    LossyEvents(queue).put(("run", "advance", (3,)))
    LossyEvents(queue).put(("other", "advance", (5,)))  # a cell this launch no longer watches
    _drain(queue, {"run": job})
    assert job.progress.steps == 3 and queue.items == []


class Gcs:
    """The head's GCS as the sweep's driver sees it: ``answers`` is what each call does next."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), 0

    def get_all_node_info(self, timeout):
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return {}


def test_a_restarted_head_is_seen_as_a_lost_cluster_within_one_check():
    """The soak restarted the Ray head under a sweep: the sweep waited for its tasks forever (the
    new head never heard of them). Its driver's GCS client then gets WrongClusterID."""
    from ray.exceptions import AuthenticationError

    from initmem_plugins.executors.ray_executor import CLUSTER_CHECK_S, ClusterWatch

    now = [0.0]
    gcs = Gcs(
        None,
        AuthenticationError("RPC error: WrongClusterID: Perhaps the client is accessing GCS after it has restarted."),
    )
    watch = ClusterWatch(gcs, clock=lambda: now[0])
    assert watch.lost() is None and gcs.calls == 0  # not asked more often than every CLUSTER_CHECK_S
    now[0] += CLUSTER_CHECK_S
    assert watch.lost() is None and gcs.calls == 1
    now[0] += CLUSTER_CHECK_S
    assert "head restarted" in watch.lost()


def test_a_silent_head_is_waited_for_then_given_up():
    from ray.exceptions import RpcError

    from initmem_plugins.executors.ray_executor import CLUSTER_CHECK_S, CLUSTER_LOST_S, ClusterWatch

    now = [0.0]
    checks = int(CLUSTER_LOST_S / CLUSTER_CHECK_S)
    gcs = Gcs(RpcError("unavailable"), None, *[RpcError("unavailable")] * (checks + 1))
    watch = ClusterWatch(gcs, clock=lambda: now[0])
    said = []
    for _ in range(checks + 3):
        now[0] += CLUSTER_CHECK_S
        said.append(watch.lost())
    assert said[:-1] == [None] * (checks + 2)  # silent once, then answering: the clock starts again
    assert "has not answered for" in said[-1]


def test_a_head_that_restarts_while_cells_are_submitted_ends_the_sweep_in_one_line(monkeypatch):
    """The soak restarted the head while the sweep handed Ray its cells: Ray's AuthenticationError
    (WrongClusterID) came out of ``.remote()`` as a traceback. The cells handed over are KILLED."""
    from types import SimpleNamespace

    import ray
    from ray.exceptions import AuthenticationError

    from initmem_core.config import RunConfig
    from initmem_plugins.executors import ray_executor
    from initmem_plugins.executors.ray_executor import ClusterLost, RayExecutor

    class Task:
        def __init__(self):
            self.handed = 0

        def options(self, **options):
            return self

        def remote(self, *args):
            if self.handed == 1:
                raise AuthenticationError(
                    "RPC error: WrongClusterID: Perhaps the client is accessing GCS after it has restarted."
                )
            self.handed += 1
            return f"ref{self.handed}"

    class Sweep:
        uri, experiment = "http://127.0.0.1:5000", "initmem"

        def __init__(self):
            self.killed = []

        def submit(self, cell, scheduled=False):
            return SimpleNamespace(cell=cell, progress=None)

        def interrupt(self, jobs):
            self.killed.extend(job.cell.run_id for job in jobs)

    executor, sweep, waited = RayExecutor(address="127.0.0.1:6379", lockstep="off"), Sweep(), []
    monkeypatch.setattr(executor, "remote_task", Task)
    monkeypatch.setattr(ray_executor, "wait_for_server", waited.append)
    monkeypatch.setattr(ray._private.worker.global_worker, "gcs_client", None, raising=False)
    cells = [SimpleNamespace(config=RunConfig(sigma=s), run_id=f"run{s}") for s in (1, 2)]
    with pytest.raises(ClusterLost, match=r"^lost the Ray cluster at 127.0.0.1:6379: its head restarted"):
        executor._run_tasks(cells, sweep, events=None)
    assert sweep.killed == ["run1"]
    assert waited == [sweep.uri] * 2  # before each cell is handed out: a server restarting is waited for


class FlakySweep:
    """A sweep whose store fails the first ``failures`` closes as a server killed mid-answer does."""

    uri = "http://127.0.0.1:5000"

    def __init__(self, failures):
        self.failures, self.closed, self.interrupted = failures, [], []

    def close(self, job, error=""):
        from mlflow.exceptions import MlflowException

        if self.failures:
            self.failures -= 1
            raise MlflowException(
                "API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/get failed with exception "
                "('Connection broken: IncompleteRead(0 bytes read, 9291 more expected)')"
            )
        self.closed.append((job, error))

    def interrupt(self, jobs):
        self.close(None)
        self.interrupted.extend(jobs)


def test_closing_a_cell_waits_out_a_restarting_server(monkeypatch):
    """The soak killed the MLflow server while the sweep read a finished cell's status: the
    sweep ended with MLflow's IncompleteRead traceback."""
    from initmem_plugins.executors import ray_executor

    monkeypatch.setattr(ray_executor.time, "sleep", lambda seconds: None)
    sweep = FlakySweep(failures=2)
    ray_executor.close_cell(sweep, "job", "")
    assert sweep.closed == [("job", "")]


def test_a_server_that_stays_down_ends_the_sweep_in_one_line(monkeypatch):
    from initmem_core.errors import ConfigError
    from initmem_plugins.executors import ray_executor

    monkeypatch.setattr(ray_executor, "STORE_WAIT_S", 0.0)
    with pytest.raises(ConfigError, match=r"^tracking store http://127.0.0.1:5000 cannot be reached: API request"):
        ray_executor.close_cell(FlakySweep(failures=1), "job", "")


def test_interrupting_cells_marks_those_the_store_takes_and_raises_nothing():
    from initmem_plugins.executors.ray_executor import interrupt_cells

    sweep = FlakySweep(failures=1)
    interrupt_cells(sweep, ["a", "b"])  # the store fails on a, takes b
    assert sweep.interrupted == ["b"]


@pytest.mark.slow(seconds=40)
def test_a_relaunch_reuses_the_child_run_a_dead_remote_launch_left_scheduled(tracking_uri, tmp_path, monkeypatch):
    """A Ray launch creates every cell's child run SCHEDULED before Ray runs it. The soak killed
    such a launch (``kill_sweep``) before Ray started some cells: the relaunch made each of them a
    second child run, and the first stayed SCHEDULED for good. It is now run again in its run."""
    from mlflow.tracking import MlflowClient
    from typer.testing import CliRunner

    from initmem_cli.app import app

    monkeypatch.chdir(tmp_path)
    cell = ["--data", "digits", "--epochs", "1", "--train-size", "64", "--batch-size", "32", "--threads", "1"]
    sweep = ["sweep", *cell, "--sigma", "1", "--seed", "0", "--name", "left", "--tracking-uri", tracking_uri]
    runner = CliRunner()
    assert runner.invoke(app, sweep).exit_code == 0
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("initmem").experiment_id

    def children():
        runs = client.search_runs([experiment], "tags.`initmem.sweep` = 'left'")
        return [run for run in runs if "mlflow.parentRunId" in run.data.tags]

    [child] = children()
    client.update_run(child.info.run_id, status="SCHEDULED")  # as the dead launch left it
    done = runner.invoke(app, sweep)
    assert done.exit_code == 0, done.output
    assert [(run.info.run_id, run.info.status) for run in children()] == [(child.info.run_id, "FINISHED")]


def test_a_cell_waits_for_a_restarting_server_before_it_starts(monkeypatch):
    """The soak restarted the MLflow server under 128 queued cells: each cell Ray started meanwhile
    failed at once ("cannot be reached"): 118 failed attempts in one launch."""
    import urllib.error

    from initmem_plugins.executors import remote_cell

    answers = [ConnectionRefusedError(111, "Connection refused"), urllib.error.HTTPError("u", 503, "", {}, None)]
    asked, slept = [], []

    class Answer:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def urlopen(url, timeout):
        asked.append(url)
        if answers:
            raise answers.pop(0)
        return Answer()

    monkeypatch.setattr(remote_cell.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(remote_cell.time, "sleep", slept.append)
    remote_cell.wait_for_server("http://127.0.0.1:5000/")
    assert asked == ["http://127.0.0.1:5000/health"] * 3 and slept == [2.0, 2.0]

    answers[:] = [urllib.error.HTTPError("u", 401, "", {}, None)]  # a login it wants: it answers
    remote_cell.wait_for_server("http://127.0.0.1:5000")
    assert len(slept) == 2
    remote_cell.wait_for_server("sqlite:///mlflow.db")  # not a server: nothing to wait for
    assert len(asked) == 4

    monkeypatch.setattr(remote_cell.urllib.request, "urlopen", lambda url, timeout: (_ for _ in ()).throw(OSError()))
    remote_cell.wait_for_server("http://127.0.0.1:5000", wait_s=0.0)  # down for good: gives up, says nothing


def test_a_cell_asks_again_when_the_server_goes_down_after_its_health_check(monkeypatch):
    """The many-writers run: a cell whose server went down between the health check and its first
    requests (or whose PostgreSQL was down behind a healthy MLflow) failed "cannot be reached";
    3 of 10 launches lost a cell that way. Its opening requests are now asked again."""
    from initmem_core.config import RunConfig
    from initmem_core.errors import ConfigError
    from initmem_plugins.executors import remote_cell

    down = ConfigError("tracking store http://127.0.0.1:5000 cannot be reached: 503 Service Unavailable; check it")
    outcomes: list = [down, down]
    begun, waits, slept = [], [], []

    class Writer:
        finished = False

        def __init__(self, uri, experiment, run_id):
            if outcomes:
                raise outcomes.pop(0)

        def begin_attempt(self):
            begun.append(True)

    now = [0.0]
    monkeypatch.setattr(remote_cell, "ServerCellWriter", Writer)
    monkeypatch.setattr(remote_cell, "wait_for_server", lambda uri, wait_s: waits.append(wait_s))
    monkeypatch.setattr(remote_cell.time, "sleep", lambda s: (slept.append(s), now.__setitem__(0, now[0] + s)))
    monkeypatch.setattr(remote_cell.time, "monotonic", lambda: now[0])
    task = remote_cell.CellTask(config=RunConfig(), run_id="r", uri="http://127.0.0.1:5000", experiment="e")

    assert isinstance(remote_cell.open_attempt(task, wait_s=60.0), Writer)
    assert begun == [True] and slept == [2.0, 2.0] and waits == [60.0, 58.0, 56.0]  # each wait within the 60 s

    outcomes[:] = [ConfigError("tracking server http://127.0.0.1:5000 refused the credentials (...)")]
    with pytest.raises(ConfigError, match="refused"):  # not the server's restart: at once
        remote_cell.open_attempt(task, wait_s=60.0)
    assert len(slept) == 2

    outcomes[:] = [down] * 100  # down for good: the cell fails as before, once its wait is spent
    with pytest.raises(ConfigError, match="cannot be reached"):
        remote_cell.open_attempt(task, wait_s=10.0)
    assert len(slept) == 2 + 5


def test_a_cells_progress_whose_start_was_lost_moves_no_bar_and_ends_nothing():
    """The cluster soak (seed 11, 2026-12-05): a killed node took a cell's start event with it, and
    the next `advance` reached a bar never added to the display: a KeyError traceback ended the sweep."""
    from rich.progress import Progress

    from initmem_cli.sweep_progress import CellBar
    from initmem_plugins.executors.remote_cell import RetriedCellProgress

    display = Progress()
    progress = RetriedCellProgress(CellBar(display, "cell"))
    progress.advance(5)  # was: KeyError from rich, the task never added
    progress.epoch_done(1, {"train_acc": 0.5, "val_acc": 0.5})
    assert display.tasks == []
    progress.start(2, 10)  # the next attempt's start arrives: the bar appears and moves from there
    progress.advance(3)
    (task,) = display.tasks
    assert task.completed == 3 and task.total == 20
