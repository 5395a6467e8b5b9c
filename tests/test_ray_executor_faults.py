"""What the Ray executor does when the cluster misbehaves under a sweep (found by the cluster chaos
soak, issue 48), against fakes of Ray's objects: no Ray instance is started."""

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
    from initmem_core.sweep.executors.ray_executor import LossyEvents, _drain

    queue = UnavailableQueue()
    _drain(queue, {})  # before: ActorUnavailableError
    LossyEvents(queue).put(("run", "advance", (3,)))  # before (the task's put): the cell raised


def test_progress_events_still_reach_their_cells():
    from initmem_core.sweep.executors.ray_executor import LossyEvents, _drain

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

    from initmem_core.sweep.executors.ray_executor import CLUSTER_CHECK_S, ClusterWatch

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

    from initmem_core.sweep.executors.ray_executor import CLUSTER_CHECK_S, CLUSTER_LOST_S, ClusterWatch

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
    from initmem_core.sweep.executors import ray_executor

    monkeypatch.setattr(ray_executor.time, "sleep", lambda seconds: None)
    sweep = FlakySweep(failures=2)
    ray_executor.close_cell(sweep, "job", "")
    assert sweep.closed == [("job", "")]


def test_a_server_that_stays_down_ends_the_sweep_in_one_line(monkeypatch):
    from initmem_core.errors import ConfigError
    from initmem_core.sweep.executors import ray_executor

    monkeypatch.setattr(ray_executor, "STORE_WAIT_S", 0.0)
    with pytest.raises(ConfigError, match=r"^tracking store http://127.0.0.1:5000 cannot be reached: API request"):
        ray_executor.close_cell(FlakySweep(failures=1), "job", "")


def test_interrupting_cells_marks_those_the_store_takes_and_raises_nothing():
    from initmem_core.sweep.executors.ray_executor import interrupt_cells

    sweep = FlakySweep(failures=1)
    interrupt_cells(sweep, ["a", "b"])  # the store fails on a, takes b
    assert sweep.interrupted == ["b"]
