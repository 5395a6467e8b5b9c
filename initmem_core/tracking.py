"""A small tracker interface, so training code never talks to MLflow directly.

``MlflowTracker`` writes through ``MlflowClient`` (explicit run ids, no global active run, so
sweeps and threads cannot cross wires). ``MemoryTracker`` keeps everything in memory: unit
tests and ``tracking=False`` runs use it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .errors import ConfigError

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
DEFAULT_EXPERIMENT = "initmem"
MLFLOW_PARAM_LIMIT = 100  # params per log_batch call


def resolve_tracking_uri(uri: str | None = None) -> str:
    """``--tracking-uri``, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` here."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


class Tracker(Protocol):
    run_id: str | None

    def start_run(self, name: str, params: dict[str, Any], tags: dict[str, str]) -> str: ...
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...
    def set_tags(self, tags: dict[str, str]) -> None: ...
    def log_text(self, text: str, artifact_file: str) -> None: ...
    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None: ...
    def end_run(self, status: str = "FINISHED") -> None: ...


@dataclass
class MemoryTracker:
    """Records every call; nothing leaves the process."""

    run_id: str | None = None
    name: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: list[tuple[int, str, float]] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    status: str | None = None

    def start_run(self, name, params, tags):
        self.run_id, self.name = f"memory-{id(self):x}", name
        self.params.update(params)
        self.tags.update(tags)
        return self.run_id

    def log_metrics(self, metrics, step):
        self.metrics.extend((step, key, float(value)) for key, value in metrics.items())

    def set_tags(self, tags):
        self.tags.update(tags)

    def log_text(self, text, artifact_file):
        self.texts[artifact_file] = text

    def log_artifact(self, local_path, artifact_path=None):
        path = Path(local_path)
        self.files[f"{artifact_path}/{path.name}" if artifact_path else path.name] = path

    def end_run(self, status="FINISHED"):
        self.status = status

    def history(self, key: str) -> list[tuple[int, float]]:
        return [(step, value) for step, name, value in self.metrics if name == key]


def quiet_mlflow() -> None:
    # MLflow's INFO lines (database migrations, run links) would break our progress display.
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def artifact_root_for(uri: str, experiment: str) -> str | None:
    """For a SQLite store, keep artifacts beside the database (as ``mlflow server`` does)."""
    if not uri.startswith("sqlite:///"):
        return None
    database = Path(uri[len("sqlite:///"):]).expanduser().resolve()
    return (database.parent / "mlartifacts" / experiment).as_uri()


def open_client(uri: str | None = None):
    """An ``MlflowClient`` on a store that is known to answer; ``ConfigError`` if it does not."""
    from mlflow.tracking import MlflowClient

    quiet_mlflow()

    uri = resolve_tracking_uri(uri)
    if uri.startswith("sqlite:///"):
        folder = Path(uri[len("sqlite:///"):]).expanduser().resolve().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise ConfigError(
                f"tracking store {uri} cannot be written: {folder} is missing or read-only; "
                "pass --tracking-uri with a writable path or a server URL"
            )
    client = MlflowClient(tracking_uri=uri)
    try:
        client.search_experiments(max_results=1)
    except Exception as error:  # unreachable server, bad scheme, corrupt database
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"tracking store {uri} cannot be reached: {first_line}; check --tracking-uri") from None
    return client


def ensure_experiment(client, uri: str, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_root_for(uri, name))
    except Exception:  # created meanwhile by a parallel worker
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


class MlflowTracker:
    """Logs one run. ``parent_run_id`` nests it under a sweep's parent run."""

    def __init__(self, uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT,
                 parent_run_id: str | None = None, run_id: str | None = None):
        self.uri = resolve_tracking_uri(uri)
        self.experiment = experiment
        self.parent_run_id = parent_run_id
        self.run_id = run_id
        self.client = open_client(self.uri)
        self.experiment_id = ensure_experiment(self.client, self.uri, experiment)

    def start_run(self, name, params, tags):
        from mlflow.entities import Param

        tags = dict(tags)
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags=tags)
        self.run_id = run.info.run_id
        items = [Param(key, str(value)) for key, value in params.items()]
        for start in range(0, len(items), MLFLOW_PARAM_LIMIT):
            self.client.log_batch(self.run_id, params=items[start:start + MLFLOW_PARAM_LIMIT])
        return self.run_id

    def log_metrics(self, metrics, step):
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def set_tags(self, tags):
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_text(self, text, artifact_file):
        self.client.log_text(self.run_id, text, artifact_file)

    def log_artifact(self, local_path, artifact_path=None):
        self.client.log_artifact(self.run_id, str(local_path), artifact_path)

    def end_run(self, status="FINISHED"):
        self.client.set_terminated(self.run_id, status)


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str)
