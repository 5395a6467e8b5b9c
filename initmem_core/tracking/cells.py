"""How a sweep cell's run and progress reach the tracking store and the sweep's display.

The sweep creates each child run itself, before the cell is handed to an executor, so it can end
the cell FAILED whatever happens to it; it holds a ``ChildRunWriter`` on that run. Then either a
local worker's ``QueueTracker`` and ``QueueProgress`` send every call through one queue to the
sweep process, which replays it there (workers never open the store, so N workers on one SQLite
file cannot lose a row or die on a locked database), or a remote worker (Ray, Slurm) writes into
the same child run with a ``ServerCellWriter`` and only progress travels back.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from initmem_core.tracking.tracker import ForwardedCalls, MlflowTracker
from initmem_core.tracking.writing import log_in_batches
from initmem_core.vocabulary import (
    ATTEMPTS_TAG,
    ENDED,
    FAILED,
    FAILURE_REASON_TAG,
    FINISHED,
    RUNNING,
    WORKER_TAG,
)

#: Calls a worker may send, and so the only ones the sweep process replays.
TRACKER_CALLS = frozenset(
    {"start_run", "resume_run", "log_metrics", "set_tags", "log_text", "log_artifact", "log_dataset", "end_run"}
)
PROGRESS_CALLS = frozenset({"start", "advance", "epoch_done"})
PROGRESS_INTERVAL_S = 0.25  # advance() is called every step; the queue needs far fewer messages


LEASES_FOLDER = "initmem-leases"


class CellLeases:
    """Which cells this sweep process owns: an exclusive lock per config hash, in
    ``initmem-leases/`` beside the store, held until the sweep ends. The kernel drops a lock
    when its process dies, however it dies, and the sweep's workers die with it (see the local
    executor's ``die_with_parent``), so a lock that is held means a live owner: a relaunch leaves
    that cell alone rather than run or resume it a second time."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.held: list[Any] = []

    def take(self, config_hash: str) -> bool:
        from filelock import FileLock, Timeout

        self.folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.folder / f"{config_hash}.lock", timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return False
        self.held.append(lock)
        return True

    def release(self) -> None:
        for lock in self.held:
            lock.release()
        self.held.clear()


def quiet_run_links() -> None:
    """MLflow prints two lines of links whenever a run on a server ends: hundreds in a sweep, and
    through the progress display."""
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


#: The config fields a run also logs as tags, for the MLflow runs table (``ui_view``): those a
#: sweep's group label leaves out (sigma, seed), and the rate.
TABLE_FIELDS = ("sigma", "seed", "lr")


def table_tags(params: Mapping[str, Any]) -> dict[str, str]:
    """``TABLE_FIELDS`` of a run's params as tags, each the very text of its param (a tag "2"
    beside a param "2.0" would read as two values)."""
    return {key: str(params[key]) for key in TABLE_FIELDS if key in params}


def _log_params(client, run_id: str, params: dict[str, Any]) -> None:
    from mlflow.entities import Param

    log_in_batches(client, run_id, "params", [Param(key, str(value)) for key, value in params.items()])


def _set_tags(client, run_id: str, tags: dict[str, Any]) -> None:
    from mlflow.entities import RunTag

    log_in_batches(client, run_id, "tags", [RunTag(key, str(value)) for key, value in tags.items()])


class ChildRunWriter(MlflowTracker):
    """Writes into a child run the sweep created before the cell started.

    ``start_run`` logs into that run; called again by ``run`` with more params, it only adds
    (MLflow accepts a param logged twice with the same value).
    """

    run_id: str  # the child run the sweep created, given at construction

    def __init__(self, uri: str, experiment: str, run_id: str):
        super().__init__(uri, experiment, run_id=run_id)
        self.ended: str | None = None

    def start_run(self, name, params, tags):
        _log_params(self.client, self.run_id, params)
        _set_tags(self.client, self.run_id, tags)
        self.log_requirements()  # the sweep's processes share one environment: read once, here
        return self.run_id

    def end_run(self, status=FINISHED):
        super().end_run(status)
        self.ended = status

    def ended_status(self) -> str:
        """How the run ended: as this writer ended it, else as the store says (a remote worker
        wrote it there; RUNNING if nobody ended it)."""
        return self.ended or self.client.get_run(self.run_id).info.status

    def fail(self, error: str, status: str = FAILED) -> None:
        """End a cell that raised, or whose worker died, with its reason, unless it already
        ended, here or in a worker that wrote to the store itself."""
        if self.ended:
            return
        stored = self.client.get_run(self.run_id).info.status
        if stored in ENDED:
            self.ended = stored
            return
        self.set_tags({FAILURE_REASON_TAG: error[:5000]})
        self.end_run(status)


class ServerCellWriter(MlflowTracker):
    """A remote worker's tracker: writes straight into the child run the sweep created.

    Made to run again. Ray re-runs a cell whose worker died, and Slurm requeues a preempted job,
    into the same run (never a new one, so a cell has one child run however often it starts).
    An attempt logs only the params the run does not hold yet (another node may resolve another
    device; MLflow refuses to change a param) and only the metric steps it does not hold yet, so
    no row is ever written twice. Which attempt wrote a step is not recorded: an attempt resumes
    from the previous one's checkpoint when it can reach it, and otherwise trains the same config
    from the start again, which on CPU with fixed ``--threads`` recomputes the very same values.
    """

    run_id: str  # the child run the sweep created, given at construction

    def __init__(self, uri: str, experiment: str, run_id: str):
        super().__init__(uri, experiment, run_id=run_id)
        run = self.client.get_run(run_id)
        self.finished = run.info.status == FINISHED  # by an attempt whose worker died just after
        self.held_params = set(run.data.params)
        self.attempt = int(run.data.tags.get(ATTEMPTS_TAG, "0")) + 1
        self.logged = {key: {m.step for m in self.client.get_metric_history(run_id, key)} for key in run.data.metrics}

    def begin_attempt(self) -> None:
        """Say which attempt runs where, and show the cell RUNNING (it was SCHEDULED)."""
        _set_tags(
            self.client, self.run_id, {ATTEMPTS_TAG: self.attempt, WORKER_TAG: f"{socket.gethostname()}:{os.getpid()}"}
        )
        self.client.update_run(self.run_id, status=RUNNING)

    def start_run(self, name, params, tags):
        _log_params(self.client, self.run_id, {k: v for k, v in params.items() if k not in self.held_params})
        _set_tags(self.client, self.run_id, tags)
        self.log_requirements()  # the worker's own environment, on its own machine
        return self.run_id


class QueueTracker(ForwardedCalls):
    """The ``Tracker`` protocol for a worker process: every call goes to the sweep process.

    Artifact files are copied into the sweep's staging folder first, since ``run`` deletes its
    temporary files before the sweep process gets to replay the call. ``uri`` names the store
    (never opened here) so that ``run`` keeps checkpoints beside it, as it does in-process.
    """

    uri: str

    def __init__(self, queue: Any, run_id: str, staging: str | Path, uri: str):
        self.queue, self.run_id, self.staging, self.uri = queue, run_id, Path(staging), uri

    def _forward(self, call: str, *args: Any) -> None:
        self.queue.put((self.run_id, call, args))

    def start_run(self, name, params, tags):
        self._forward("start_run", name, dict(params), dict(tags))
        return self.run_id

    def resume_run(self, run_id):
        self._forward("resume_run", run_id)

    def log_artifact(self, local_path, artifact_path=None):
        source = Path(local_path)
        staged = self.staging / uuid.uuid4().hex / source.name
        staged.parent.mkdir(parents=True)
        shutil.copy2(source, staged)
        self._forward("log_artifact", str(staged), artifact_path)

    def end_run(self, status=FINISHED):
        self._forward("end_run", status)


class QueueProgress:
    """The training ``Progress`` protocol for a worker; step counts are batched. ``queue`` is
    anything with ``put``: a multiprocessing queue, a Ray queue, a file on a shared disk."""

    def __init__(self, queue: Any, run_id: str, interval_s: float = PROGRESS_INTERVAL_S):
        self.queue, self.run_id, self.interval_s = queue, run_id, interval_s
        self.pending, self.last = 0, 0.0

    def _send(self, call: str, *args: Any) -> None:
        self.queue.put((self.run_id, call, args))

    def start(self, epochs, steps_per_epoch):
        self._send("start", epochs, steps_per_epoch)

    def advance(self, steps):
        self.pending += steps
        if time.monotonic() - self.last >= self.interval_s:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self._send("advance", self.pending)
            self.pending, self.last = 0, time.monotonic()

    def epoch_done(self, epoch, metrics):
        self.flush()
        self._send("epoch_done", epoch, {k: float(v) for k, v in metrics.items()})
