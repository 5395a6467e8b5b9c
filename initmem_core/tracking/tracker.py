"""A small tracker interface, so training code never talks to MLflow directly.

``MlflowTracker`` writes through ``MlflowClient`` (explicit run ids, no global active run, so
sweeps and threads cannot cross wires). Writes are batched: metrics, tags and texts wait in
memory and go to the store at most every ``flush_every_s`` seconds (and whenever the run ends),
since each write is a database transaction that costs as much as a short epoch. A run killed
outright loses nothing by it: its checkpoint holds every epoch's metrics up to that checkpoint,
and a resume logs the ones the store lacks. ``MemoryTracker`` keeps everything in memory: unit
tests and ``tracking=False`` runs use it.
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from initmem_core.errors import ConfigError, RunWarning
from initmem_core.tracking.client import ensure_experiment, error_line, fail_fast_http, open_client, store_must_answer
from initmem_core.tracking.login import PASSWORD_ENV, USERNAME_ENV, login_must_be_taken, refusal
from initmem_core.tracking.pending import Backoff, PendingWrites, keep_copy, keep_for_sync, unsynced_folder
from initmem_core.tracking.provenance import REQUIREMENTS_ARTIFACT, requirements_text, source_tags
from initmem_core.tracking.sqlite_store import wait_while_database_locked
from initmem_core.tracking.system_metrics import SystemMetrics
from initmem_core.tracking.uris import DEFAULT_EXPERIMENT, resolve_tracking_uri, sqlite_path, store_folder
from initmem_core.tracking.writing import log_params
from initmem_core.vocabulary import (
    DATASET_CONTEXT_TAG,
    FAILURE_REASON_TAG,
    FINISHED,
    PARENT_TAG,
    RUNNING,
    STOPPED_BY_TAG,
)

#: The contexts of a run's dataset inputs, one per split, as MLflow's documentation names them.
TRAINING, VALIDATION, TESTING = "training", "validation", "testing"
#: Tags that say why a run ended early: a resumed run is no longer stopped or failed, so they go.
ENDED_EARLY_TAGS = (STOPPED_BY_TAG, FAILURE_REASON_TAG)
#: How long metrics may wait in memory before they are written: the MLflow UI lags a running run
#: by at most this much, and a run writes about once per interval instead of once per epoch.
FLUSH_EVERY_S = 5.0


class Tracker(Protocol):
    #: Asked while the run is being opened: a signal number to give up on opening it, or ``None``
    #: (a tracker that opens its store in a helper process asks it; others never do).
    give_up_opening: Callable[[], int | None]

    @property
    def run_id(self) -> str | None:
        """The run written to, once started or resumed (a tracker given its run has it from the start)."""

    @property
    def uri(self) -> str | None:
        """The store the run is written to (checkpoints go beside it); ``None``: no store."""

    @property
    def unsynced(self) -> str:
        """Once the run is ended: what the store did not take, and where it waits for ``initmem sync``
        (empty when it took everything)."""

    @property
    def lost(self) -> bool:
        """Once the run is ended: whether some writes could not even be kept for ``initmem sync``."""

    def start_run(self, name: str, params: dict[str, Any], tags: dict[str, str]) -> str: ...
    def resume_run(self, run_id: str) -> None:
        """Reopen a run (status RUNNING, without the tags of its early end); metric steps it
        already holds are not logged again."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...
    def set_tags(self, tags: dict[str, str]) -> None: ...
    def log_text(self, text: str, artifact_file: str) -> None: ...
    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None: ...
    def log_dataset(self, name: str, digest: str, profile: dict[str, Any], context: str = TRAINING) -> None:
        """One split of the run's data as an MLflow input (``context``: ``training``, ``validation``
        or ``testing``): the runs table's Dataset column."""

    def end_run(self, status: str = FINISHED) -> None: ...
    def close(self) -> None:
        """Release what the tracker holds (a helper process) once its run is over, or was never
        begun; idempotent."""


class TrackerDefaults:
    """What a ``Tracker`` has unless it says otherwise: no store, every write taken, nothing
    held that ``close`` must release, and no opening to give up."""

    uri: str | None = None
    unsynced: str = ""
    lost: bool = False
    give_up_opening: Callable[[], int | None] = staticmethod(lambda: None)

    def close(self) -> None:
        pass


class ForwardedCalls(TrackerDefaults):
    """The ``Tracker`` calls that only carry data, as plain values for another process: a tracker
    that hands its calls on (``TrackerProcess``, the local executor's ``QueueTracker``) defines
    ``_forward(call, *args)`` and the calls with answers (``start_run``, ``resume_run``,
    ``log_artifact``, ``end_run``)."""

    def _forward(self, call: str, *args: Any) -> Any:
        raise NotImplementedError

    def log_metrics(self, metrics, step):
        self._forward("log_metrics", {k: float(v) for k, v in metrics.items()}, int(step))

    def set_tags(self, tags):
        self._forward("set_tags", {k: str(v) for k, v in tags.items()})

    def log_text(self, text, artifact_file):
        self._forward("log_text", text, artifact_file)

    def log_dataset(self, name, digest, profile, context=TRAINING):
        self._forward("log_dataset", name, digest, dict(profile), context)


@dataclass
class MemoryTracker(TrackerDefaults):
    """Records every call; nothing leaves the process."""

    run_id: str | None = None
    name: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: list[tuple[int, str, float]] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    datasets: list[tuple[str, str, dict[str, Any], str]] = field(default_factory=list)  # ..., context
    status: str | None = None
    logged: set[tuple[int, str]] = field(default_factory=set)  # (step, key) a resumed run already holds

    def start_run(self, name, params, tags):
        self.run_id, self.name = f"memory-{id(self):x}", name
        self.params.update(params)
        self.tags.update(tags)
        return self.run_id

    def resume_run(self, run_id):
        self.run_id, self.status = run_id, None
        self.logged = {(step, key) for step, key, _ in self.metrics}
        for key in ENDED_EARLY_TAGS:
            self.tags.pop(key, None)

    def log_metrics(self, metrics, step):
        self.metrics.extend(
            (step, key, float(value)) for key, value in metrics.items() if (step, key) not in self.logged
        )

    def set_tags(self, tags):
        self.tags.update(tags)

    def log_text(self, text, artifact_file):
        self.texts[artifact_file] = text

    def log_artifact(self, local_path, artifact_path=None):
        path = Path(local_path)
        self.files[f"{artifact_path}/{path.name}" if artifact_path else path.name] = path

    def log_dataset(self, name, digest, profile, context=TRAINING):
        self.datasets.append((name, digest, dict(profile), context))

    def end_run(self, status=FINISHED):
        self.status = status


class MlflowTracker(TrackerDefaults):
    """Logs one run. ``parent_run_id`` nests it under a sweep's parent run.

    Starting or reopening a run must succeed (it is how a bad store is reported before anything
    trains). After that a store that stops answering does not stop training: every write goes
    through ``pending``, retried at later logging points, backing off, and ``end_run`` leaves
    whatever the store still refuses in a local file for ``initmem sync``.
    """

    uri: str

    def __init__(
        self,
        uri: str | None = None,
        experiment: str = DEFAULT_EXPERIMENT,
        parent_run_id: str | None = None,
        run_id: str | None = None,
        flush_every_s: float = FLUSH_EVERY_S,
        source_name: str | None = None,
        source_folder: str | None = None,
        system_metrics: bool = False,
    ):
        self.uri = resolve_tracking_uri(uri)
        self.flush_every_s = flush_every_s
        #: What started the run and where (``provenance.source_tags``); this process's own by default.
        self.source_name, self.source_folder = source_name, source_folder
        self._requirements_logged = False
        self.system_metrics = system_metrics  # MLflow's monitor of the machine, while the run runs
        self._monitor: Any = None
        self.parent_run_id = parent_run_id
        self.run_id = run_id
        self.client = open_client(self.uri, probe=False)
        with store_must_answer(self.uri):  # the probe: a store that cannot answer this fails here
            self.experiment_id = ensure_experiment(self.client, self.uri, experiment)
        self.pending = PendingWrites()
        self.backoff = Backoff()
        self.last_flush = time.monotonic()
        self.logged: dict[str, set[int]] = {}  # key -> steps a resumed run already holds
        self.unsynced = ""  # set by end_run when the store did not take everything: how many writes, where
        self.lost = False  # whether some of it could not be kept either (the unsynced folder refused it)
        self._not_kept: list[str] = []  # what the unsynced folder refused, and why
        self.refused = False  # whether the store's last failure was a refused login (it expired mid-run)

    def wait_until_writable(self) -> None:
        """Return once the store would take a write: a SQLite store another process holds locked is
        waited for, said in one line (``store.wait_while_database_locked``); others return at once."""
        database = sqlite_path(self.uri)
        if database is not None:
            wait_while_database_locked(database, self.uri)

    def start_run(self, name, params, tags):
        self.wait_until_writable()  # the run and its params are two writes: not one stuck between them
        tags = {**source_tags(self.source_name, self.source_folder), **tags}
        if self.parent_run_id:
            tags[PARENT_TAG] = self.parent_run_id
        with login_must_be_taken(self.uri):  # a user who may read the store but not write to it
            run = self.client.create_run(self.experiment_id, run_name=name, tags=tags)
        self.run_id = run.info.run_id
        log_params(self.client, self.run_id, params)
        self.log_requirements()
        self.flush(force=True)  # with the run's start: what a run holds from its first moment
        self._start_monitor(resume=False)
        return self.run_id

    def _start_monitor(self, resume: bool) -> None:
        if self.system_metrics and self._monitor is None:
            self._monitor = SystemMetrics(self.uri, self._started(), resume=resume)

    def stop_monitor(self) -> None:
        """Stop recording system metrics (their last sample is written); idempotent."""
        if self._monitor is not None:
            self._monitor.finish()
            self._monitor = None

    def log_requirements(self) -> None:
        """Every installed package and its version, as ``environment/requirements.txt``, once per
        run: read where the run is written (here, off the training thread), once per process."""
        if not self._requirements_logged:
            self._requirements_logged = True
            self.log_text(requirements_text(), REQUIREMENTS_ARTIFACT)

    def resume_run(self, run_id):
        from mlflow.exceptions import MlflowException

        try:
            with login_must_be_taken(self.uri):
                run = self.client.get_run(run_id)
        except MlflowException:
            raise ConfigError(
                f"the checkpoint's run {run_id} is not in {self.uri}; "
                "resume with the --tracking-uri the run was tracked in"
            ) from None
        if run.info.status == FINISHED:
            raise ConfigError(f"run {run_id} already finished; there is nothing to resume")
        self.run_id = run_id
        self.logged = {key: {m.step for m in self.client.get_metric_history(run_id, key)} for key in run.data.metrics}
        self.client.update_run(run_id, status=RUNNING)
        for key in ENDED_EARLY_TAGS:  # set again if this run is stopped or fails again
            if key in run.data.tags:
                self.client.delete_tag(run_id, key)
        self._start_monitor(resume=True)  # on from the system metrics' last step

    def log_metrics(self, metrics, step):
        now = int(time.time() * 1000)
        self.pending.metrics.extend(
            (k, float(v), now, step) for k, v in metrics.items() if step not in self.logged.get(k, ())
        )
        self.flush()

    def set_tags(self, tags):
        self.pending.tags.update({k: str(v) for k, v in tags.items()})
        self.flush()

    def log_text(self, text, artifact_file):
        self.pending.texts[artifact_file] = text
        self.flush()

    def log_artifact(self, local_path, artifact_path=None):
        if self.backoff.due():  # the file may be temporary: upload it now, or keep a copy
            try:
                with fail_fast_http():
                    self.client.log_artifact(self.run_id, str(local_path), artifact_path)
                return
            except Exception as error:  # kept below, like any other write the store refused
                self._failed(error)
        try:
            copy = keep_copy(unsynced_folder(store_folder(self.uri)), self._started(), local_path)
        except OSError as error:  # the spool refuses it too: said when the run ends
            self._not_kept.append(f"{Path(local_path).name} ({_reason(error)})")
            return
        self.pending.files.append((copy, artifact_path))
        self.flush()

    def log_dataset(self, name, digest, profile, context=TRAINING):
        import json

        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(name, digest, "code", json.dumps({"initmem.dataset": name}), profile=json.dumps(profile))
        try:  # once per split, at the run's start: not worth a place in the pending writes
            with fail_fast_http():
                self.client.log_inputs(self.run_id, [DatasetInput(dataset, [InputTag(DATASET_CONTEXT_TAG, context)])])
        except Exception as error:
            self._failed(error)

    def end_run(self, status=FINISHED):
        self.stop_monitor()  # its last sample before the end: it stops by itself on an ended run
        # A run that lost a file is not ended in the store: it stays RUNNING, so that a resume
        # from its checkpoint may record the rest.
        self.pending.status = None if self._not_kept else (status, int(time.time() * 1000))
        self.write_or_keep()

    def write_or_keep(self) -> None:
        """Write everything pending now; what the store refuses goes to the unsynced file. If that
        file cannot be written either, ``lost`` is set and ``unsynced`` says what was not recorded
        (the run's checkpoint still holds its figures: a resume records them)."""
        self.flush(force=True)
        if not (self.pending or self._not_kept):
            return
        folder = unsynced_folder(store_folder(self.uri))
        run_id = self.run_id or ""
        self.unsynced, path = keep_for_sync(self.pending, folder, run_id, self.uri, self._not_kept, self._sync_when())
        if path is not None:
            warnings.warn(
                f"tracking store {self.uri} did not take everything run {self.run_id} logged; "
                f"it is kept in {path}: run `initmem sync --tracking-uri {self.uri}` {self._sync_when()}",
                RunWarning,
                stacklevel=3,
            )
        self.pending = PendingWrites()
        self.lost = self.lost or bool(self._not_kept)
        self._not_kept = []

    def flush(self, force: bool = False) -> None:
        """Write what is pending if ``flush_every_s`` has passed since the last write and the
        store is not backing off after a failure; ``force``: now, whatever the clock says."""
        if not self.pending:
            return
        if not force:
            waiting = self.backoff.next_try if self.backoff.failing else self.last_flush + self.flush_every_s
            if time.monotonic() < waiting:
                return
        try:
            with fail_fast_http():
                self.pending.send(self.client, self._started())
        except Exception as error:  # unreachable, locked, timed out, a login refused: training goes on
            self._failed(error)
        else:
            self.backoff.succeeded()
            self.refused = False
        self.last_flush = time.monotonic()

    def _started(self) -> str:
        """The run's id: every write comes after ``start_run`` or ``resume_run`` (or a ``run_id``
        given at construction)."""
        assert self.run_id is not None, "a write before start_run or resume_run"
        return self.run_id

    def _failed(self, error: Exception) -> None:
        refused = refusal(self.uri, error)
        if not self.backoff.failing:  # one line per outage, not per retry
            said = refused or f"tracking store {self.uri} is not answering ({_reason(error)})"
            warnings.warn(f"{said}; run {self.run_id} keeps training and retries", RunWarning, stacklevel=3)
        self.refused = bool(refused)
        self.backoff.failed()

    def _sync_when(self) -> str:
        if self.refused:  # e.g. the password was changed while the run trained
            return f"once {USERNAME_ENV} / {PASSWORD_ENV} hold a login the server takes"
        return "once the store answers"


def _reason(error: BaseException) -> str:
    """Why a write failed, in a few words: an ``OSError``'s own words, else the first line of the
    message (SQL errors go on with the statement) without SQLAlchemy's ``(sqlite3.X)`` prefix."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return re.sub(r"^\([\w.]+\)\s*", "", error_line(error))[:200]
