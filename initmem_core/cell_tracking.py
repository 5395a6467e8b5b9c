"""How a sweep cell reaches the tracking store: through the sweep process, the store's one writer.

The sweep creates each child run itself (so it knows the real run id before the cell starts,
and can mark the cell FAILED whatever happens to it) and writes it with a ``ChildRunWriter``.
A cell in a worker process gets a ``QueueTracker`` instead: every tracker call, and every
progress event, travels through one multiprocessing-manager queue to the sweep process, which
replays it into the ``ChildRunWriter``. Workers never open the store, so N workers on one
SQLite file cannot lose a row or die on a locked database.
"""

from __future__ import annotations

import shutil
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from .config import RunConfig
from .tracking import MLFLOW_PARAM_LIMIT, MlflowTracker

#: Calls a worker may send, and so the only ones the sweep process replays.
TRACKER_CALLS = frozenset({"start_run", "log_metrics", "set_tags", "log_text", "log_artifact", "end_run"})
PROGRESS_CALLS = frozenset({"start", "advance", "epoch_done"})
PROGRESS_INTERVAL_S = 0.25  # advance() is called every step; the queue needs far fewer messages


def config_params(config: RunConfig) -> dict[str, Any]:
    """The config exactly as ``run`` logs it. Logged when the child is created, so even a cell
    that fails before ``run`` logs anything (or is still running) carries its config."""
    return {**config.to_dict(), "metrics": ",".join(config.metrics), "config_hash": config.config_hash()}


class ChildRunWriter(MlflowTracker):
    """Writes into a child run the sweep created before the cell started.

    ``start_run`` logs into that run; called again by ``run`` with more params, it only adds
    (MLflow accepts a param logged twice with the same value).
    """

    def __init__(self, uri: str, experiment: str, run_id: str):
        super().__init__(uri, experiment, run_id=run_id)
        self.ended: str | None = None

    def start_run(self, name, params, tags):
        from mlflow.entities import Param, RunTag

        items = [Param(key, str(value)) for key, value in params.items()]
        for start in range(0, len(items), MLFLOW_PARAM_LIMIT):
            self.client.log_batch(self.run_id, params=items[start:start + MLFLOW_PARAM_LIMIT])
        if tags:
            self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])
        return self.run_id

    def end_run(self, status="FINISHED"):
        super().end_run(status)
        self.ended = status

    def fail(self, error: str, status: str = "FAILED") -> None:
        """End a cell that raised, or whose worker died, with its reason, unless ``run`` already did."""
        if not self.ended:
            self.set_tags({"failure_reason": error[:5000]})
            self.end_run(status)


class QueueTracker:
    """The ``Tracker`` protocol for a worker process: every call goes to the sweep process.

    Artifact files are copied into the sweep's staging folder first, since ``run`` deletes its
    temporary files before the sweep process gets to replay the call. ``uri`` names the store
    (never opened here) so that ``run`` keeps checkpoints beside it, as it does in-process.
    """

    def __init__(self, queue: Any, run_id: str, staging: str | Path, uri: str):
        self.queue, self.run_id, self.staging, self.uri = queue, run_id, Path(staging), uri

    def _send(self, call: str, *args: Any) -> None:
        self.queue.put((self.run_id, call, args))

    def start_run(self, name, params, tags):
        self._send("start_run", name, dict(params), dict(tags))
        return self.run_id

    def log_metrics(self, metrics, step):
        self._send("log_metrics", {k: float(v) for k, v in metrics.items()}, int(step))

    def set_tags(self, tags):
        self._send("set_tags", {k: str(v) for k, v in tags.items()})

    def log_text(self, text, artifact_file):
        self._send("log_text", text, artifact_file)

    def log_artifact(self, local_path, artifact_path=None):
        source = Path(local_path)
        staged = self.staging / uuid.uuid4().hex / source.name
        staged.parent.mkdir(parents=True)
        shutil.copy2(source, staged)
        self._send("log_artifact", str(staged), artifact_path)

    def end_run(self, status="FINISHED"):
        self._send("end_run", status)


class QueueProgress:
    """The training ``Progress`` protocol for a worker process; step counts are batched."""

    def __init__(self, queue: Any, run_id: str):
        self.queue, self.run_id = queue, run_id
        self.pending, self.last = 0, 0.0

    def _send(self, call: str, *args: Any) -> None:
        self.queue.put((self.run_id, call, args))

    def start(self, epochs, steps_per_epoch):
        self._send("start", epochs, steps_per_epoch)

    def advance(self, steps):
        self.pending += steps
        if time.monotonic() - self.last >= PROGRESS_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self._send("advance", self.pending)
            self.pending, self.last = 0, time.monotonic()

    def epoch_done(self, epoch, metrics):
        self.flush()
        self._send("epoch_done", epoch, dict(metrics))


def ignore_sigint() -> None:
    """For the queue's manager process: Ctrl-C is for the sweep, which still drains the queue."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_cell_in_worker(config: RunConfig, run_id: str, queue: Any, staging: str, uri: str) -> tuple[str, str]:
    """A worker's task: run one cell, tracking through the queue. Returns (status, error).

    Errors come back as text: an exception object may not survive pickling back to the sweep.
    """
    from .runner import run

    progress = QueueProgress(queue, run_id)
    try:
        result = run(config, tracker=QueueTracker(queue, run_id, staging, uri), progress=progress)
        return result.status, ""
    except Exception as error:  # the run is already FAILED in the store; the sweep goes on
        return "FAILED", f"{type(error).__name__}: {error}"
