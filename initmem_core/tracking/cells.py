"""How a sweep cell's run and progress reach the tracking store and the sweep's display.

The sweep creates each child run itself, before the cell is handed to an executor, so it can end
the cell FAILED whatever happens to it; it holds a ``ChildRunWriter`` on that run. Then either a
local worker sends every tracker call and its progress (the local executor's ``QueueTracker`` and
``QueueProgress``) through one queue to the sweep process, which replays them there (workers
never open the store, so N workers on one SQLite file cannot lose a row or die on a locked
database), or a remote worker (Ray, Slurm) writes into the same child run itself
(``remote_cell.ServerCellWriter``) and only progress travels back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from initmem_core.tracking.tracker import MlflowTracker
from initmem_core.tracking.writing import log_params, log_tags
from initmem_core.vocabulary import ENDED, FAILED, FAILURE_REASON_TAG, FINISHED

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
        log_params(self.client, self.run_id, params)
        log_tags(self.client, self.run_id, tags)
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
        stored = self.ended_status()
        if stored in ENDED:
            self.ended = stored
            return
        self.set_tags({FAILURE_REASON_TAG: error[:5000]})
        self.end_run(status)
