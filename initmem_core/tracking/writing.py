"""Writing to a tracking store: entities in as few ``log_batch`` calls as MLflow's limits allow,
and data as the JSON of a text artifact."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: MLflow's limits per ``log_batch`` call.
BATCH_LIMITS = {"metrics": 1000, "params": 100, "tags": 100}


def log_in_batches(
    client: Any, run_id: str, kind: str, entities: Sequence[Any], taken: Callable[[int], None] | None = None
) -> None:
    """Log ``entities`` (MLflow ``Metric``, ``Param`` or ``RunTag`` objects; ``kind`` is
    ``metrics``, ``params`` or ``tags``) in as few ``log_batch`` calls as MLflow's limits allow.
    ``taken(count)`` is called after each call the store accepted, so a caller can drop what was
    written and never send it twice after a failure half-way."""
    limit = BATCH_LIMITS[kind]
    for start in range(0, len(entities), limit):
        chunk = entities[start : start + limit]
        client.log_batch(run_id, **{kind: list(chunk)})
        if taken is not None:
            taken(len(chunk))


def log_params(client: Any, run_id: str, params: Mapping[str, Any]) -> None:
    from mlflow.entities import Param

    log_in_batches(client, run_id, "params", [Param(key, str(value)) for key, value in params.items()])


def log_tags(client: Any, run_id: str, tags: Mapping[str, Any]) -> None:
    from mlflow.entities import RunTag

    log_in_batches(client, run_id, "tags", [RunTag(key, str(value)) for key, value in tags.items()])


def to_json(data: Any) -> str:
    import json

    return json.dumps(data, indent=2, sort_keys=True, default=str)
