"""Which tracking store: the URI and experiment name a command was given, checked so that a bad
one fails in one line, and where a store's local files (artifacts, checkpoints) go."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from initmem_core.errors import ConfigError
from initmem_core.tracking.paths import path_under

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
DEFAULT_EXPERIMENT = "initmem"
#: Backends MLflow 3 tracks into (a database dialect may name its driver: postgresql+psycopg2).
SUPPORTED_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks")
ALLOW_FILE_STORE_ENV = "MLFLOW_ALLOW_FILE_STORE"
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"  # where a store is when no --tracking-uri names one
MAX_EXPERIMENT_NAME = 500  # MLflow's MAX_EXPERIMENT_NAME_LENGTH (not imported: this module stays light)


def check_tracking_uri(uri: str) -> str:
    """A URI MLflow can track into, else one line saying what to pass instead (MLflow itself
    answers a bad one with a long traceback, and a plain path with a refusal of file stores)."""
    scheme = urlparse(uri).scheme.lower()
    file_store_allowed = os.environ.get(ALLOW_FILE_STORE_ENV, "").lower() == "true"
    if (file_store_allowed and scheme in ("", "file")) or len(scheme) == 1:
        return uri  # the user opted into MLflow's file store (one letter: a Windows drive)
    if scheme in ("", "file"):
        path = urlparse(uri).path if scheme else uri
        raise ConfigError(
            f"--tracking-uri {uri} is a path, not a tracking store; "
            f"for a SQLite database there pass sqlite:///{Path(path).expanduser().resolve()}"
        )
    if scheme.split("+")[0] not in SUPPORTED_SCHEMES:
        raise ConfigError(
            f"--tracking-uri {uri}: unsupported scheme '{scheme}'; use sqlite:///path/to/mlflow.db "
            "or a server http(s)://host:port"
        )
    if scheme in ("http", "https") and not urlparse(uri).hostname:
        raise ConfigError(f"--tracking-uri {uri} names no host; use http(s)://host:port")
    return uri


def check_experiment_name(name: str) -> str:
    if not name.strip():
        raise ConfigError("--experiment must not be empty; leave it out for the default, initmem")
    if len(name) > MAX_EXPERIMENT_NAME:
        raise ConfigError(
            f"--experiment is {len(name)} characters long; MLflow takes names of at most "
            f"{MAX_EXPERIMENT_NAME}: choose a shorter one"
        )
    return name


def resolve_tracking_uri(uri: str | None = None) -> str:
    """``--tracking-uri``, else ``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` here."""
    return uri or os.environ.get(TRACKING_URI_ENV) or DEFAULT_TRACKING_URI


def sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///") :]).expanduser().resolve() if uri.startswith("sqlite:///") else None


def store_folder(uri: str | None) -> Path:
    """Where local files of a store's runs go (checkpoints, unsynced metrics): beside a SQLite
    database, else in the current folder."""
    database = sqlite_path(resolve_tracking_uri(uri))
    return database.parent if database else Path.cwd()


def artifact_root_for(uri: str, experiment: str) -> str | None:
    """For a SQLite store, keep artifacts beside the database (as ``mlflow server`` does), in a
    folder named after the experiment that stays under ``mlartifacts`` whatever the name says."""
    database = sqlite_path(uri)
    return path_under(database.parent / "mlartifacts", experiment).as_uri() if database else None
