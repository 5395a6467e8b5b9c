"""One run that is not a sweep, read back from the store: ``initmem report RUN_ID``.

>>> run = load_single_run("3f2a...", "sqlite:///mlflow.db")
>>> run.summary["best_val_test_acc"], run.epochs[-1]["test_acc"]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from initmem_core.errors import ConfigError
from initmem_core.tracking.client import open_client
from initmem_core.tracking.records import looks_like_run_id, metric_history, search_all
from initmem_core.vocabulary import (
    FIT,
    PARENT_ROLE,
    PARENT_TAG,
    PER_EPOCH_METRICS,
    REPAIR_GAP,
    ROLE_TAG,
    SELECTION_METRICS,
    TAU_INTERP,
)

#: A run's summary figures, in the order a report shows them.
SUMMARY_METRICS = (*SELECTION_METRICS, TAU_INTERP, REPAIR_GAP, FIT)


@dataclass(frozen=True)
class SingleRun:
    run_id: str
    run_name: str
    status: str
    params: dict[str, str]
    summary: dict[str, float]
    #: one row per logged epoch: ``{"epoch": 0, "train_loss": ..., "clock_sgd": ..., ...}``
    epochs: list[dict[str, Any]] = field(default_factory=list)


def stored_runs(uri: str, experiment: str) -> tuple[list[Any], list[Any]]:
    """The runs of ``experiment`` as ``StoredRun``: the single runs (no sweep's parent nor cell)
    and the sweeps' cells. Creates no store; ``ConfigError`` when the experiment is not there."""
    from initmem_core.tracking.sweep_runs import StoredRun  # lazy: the sweep's store operations

    client = open_client(uri, create=False)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ConfigError(f"experiment '{experiment}' does not exist in the tracking store {uri}; check --experiment")
    runs = [StoredRun.of(run) for run in search_all(client, [found.experiment_id], "")]
    runs = [run for run in runs if run.tags.get(ROLE_TAG) != PARENT_ROLE]
    return [run for run in runs if PARENT_TAG not in run.tags], [run for run in runs if PARENT_TAG in run.tags]


def load_single_run(run_id: str, tracking_uri: str | None = None) -> SingleRun | None:
    """The run ``run_id`` with its summary and per-epoch figures; ``None`` when the store has no
    such run or it is a sweep's parent (a sweep, reported as one). Creates no store."""
    if not looks_like_run_id(run_id):
        return None
    client = open_client(tracking_uri, create=False)
    try:
        run = client.get_run(run_id)
    except Exception:  # MLflow raises its own error for an unknown id
        return None
    if run.data.tags.get(ROLE_TAG) == PARENT_ROLE:
        return None
    metrics = run.data.metrics
    by_epoch: dict[int, dict[str, Any]] = {}
    for key in [key for key in PER_EPOCH_METRICS if key in metrics]:
        for step, value in metric_history(client, run_id, key):
            by_epoch.setdefault(step, {"epoch": step})[key] = value
    return SingleRun(
        run_id,
        run.info.run_name or "",
        run.info.status,
        dict(run.data.params),
        {key: metrics[key] for key in SUMMARY_METRICS if key in metrics},
        [by_epoch[epoch] for epoch in sorted(by_epoch)],
    )
