"""A sweep as the MLflow UI should open it: a saved view of the runs page, and its addresses.

MLflow 3's runs page reads a saved view from the experiment tag ``mlflow.sharedViewState.<key>``
when opened at ``#/experiments/<id>/runs?viewStateShareKey=<key>``: the same record its own
"Share" and "Save as new view" buttons write (an envelope ``{name, createdAt, updatedAt,
state}`` whose ``state`` is the JSON of the page's search facets and UI state; see
``mlflow/server/js``). initmem writes one per sweep, so the comparison is ready when the page opens.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any
from urllib.parse import quote

from initmem_core.tracking.cells import TABLE_FIELDS
from initmem_core.vocabulary import (
    BEST_VAL_TEST_ACC,
    FIT,
    GROUP_LABEL_TAG,
    KIND_TAG,
    PARENT_TAG,
    STOP_EPOCH,
    STOP_REASON_TAG,
    TAU_INTERP,
    VIEW_TAG_PREFIX,
    WEIGHT_NORM_RATIO,
)

#: The experiment kind (``KIND_TAG``) that makes the UI show the model-training runs table, not the GenAI overview.
MODEL_TRAINING = "custom_model_development"
#: The runs table's columns: sigma, these metrics (in view at 1400 px, beside MLflow's Assistant
#: panel), then seed, lr and the data. Config values come from tags (``cells.TABLE_FIELDS``), not
#: params: the table averages every param column over a group's cells (a group row read sigma 1.25,
#: and lr 0.049999… for six cells of 0.05), and leaves a tag's cell empty there.
VIEW_METRICS = (BEST_VAL_TEST_ACC, FIT, TAU_INTERP, WEIGHT_NORM_RATIO)
#: Metrics every finished run has: the parallel-coordinates chart draws only runs holding all its
#: metrics, so tau_interp (logged only when a run interpolates) would empty it.
PARALLEL_METRICS = (BEST_VAL_TEST_ACC, WEIGHT_NORM_RATIO)


def view_key(sweep: str) -> str:
    """The share key of a sweep's view: the same for the same sweep, so a relaunch replaces it."""
    return "initmem-" + hashlib.sha256(sweep.encode()).hexdigest()[:12]


def _column(kind: str, key: str) -> str:
    return f"{kind}.`{key}`"  # the runs table's column ids, e.g. params.`sigma`


def view_state(parent_run_id: str) -> dict[str, Any]:
    """The runs page's state: the sweep's child runs, the chosen columns, grouped by group label,
    and charts of test accuracy against sigma."""
    section = "initmem-" + parent_run_id[:8]
    chart = {"metricSectionId": section, "isGenerated": False, "deleted": False, "runsCountToCompare": 1000}
    charts = [
        {
            "type": "SCATTER",
            "uuid": f"{section}-acc",
            **chart,
            "displayName": f"{BEST_VAL_TEST_ACC} vs sigma",
            "xaxis": {"key": "sigma", "type": "PARAM"},
            "yaxis": {"key": BEST_VAL_TEST_ACC, "type": "METRIC"},
        },
        {
            "type": "PARALLEL",
            "uuid": f"{section}-par",
            **chart,
            "showAllRuns": True,
            "selectedParams": ["sigma", "opt", "lr"],
            "selectedMetrics": list(PARALLEL_METRICS),
        },
    ]
    sigma, *others = (_column("tags", field) for field in TABLE_FIELDS)  # sigma comes first
    stops = [_column("tags", STOP_REASON_TAG), _column("metrics", STOP_EPOCH)]  # why and where each run ended
    columns = [sigma, *(_column("metrics", m) for m in VIEW_METRICS), *others, *stops, _column("attributes", "Dataset")]
    return {
        # search facets
        "searchFilter": f"tags.`{PARENT_TAG}` = '{parent_run_id}'",
        # Not by start time: the UI then also fetches the parent of the runs it found, and shows
        # it as an extra group. (Params sort as text: 10 before 2; rows still sit in their group.)
        "orderByKey": "params.`sigma`",
        "orderByAsc": True,
        # UI state
        "selectedColumns": columns,
        "columnOrder": columns,
        # by the group's short label (its full key: the tag initmem.group, on each run's page)
        "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": GROUP_LABEL_TAG}]},
        "runsHiddenMode": "SHOW_ALL",
        "useGroupedValuesInCharts": False,
        "hideEmptyCharts": True,
        "compareRunCharts": charts,
        "compareRunSections": [
            {
                "uuid": section,
                "name": "initmem: accuracy against sigma",
                "display": True,
                "isReordered": False,
                "deleted": False,
                "isGenerated": False,
                # MLflow's default, three 360 px cards a row, draws the two charts too small to read
                "columns": 1,
                "cardHeight": 420,
            }
        ],
    }


def write_view(client: Any, experiment_id: str, sweep: str, parent_run_id: str) -> str:
    """Save the sweep's view on the experiment (and mark the experiment model training);
    returns its share key."""
    key = view_key(sweep)
    now = int(time.time() * 1000)
    envelope = {
        "name": f"initmem sweep {sweep}",
        "createdAt": now,
        "updatedAt": now,
        "state": json.dumps(view_state(parent_run_id)),
    }
    client.set_experiment_tag(experiment_id, VIEW_TAG_PREFIX + key, json.dumps(envelope))
    if KIND_TAG not in client.get_experiment(experiment_id).tags:
        client.set_experiment_tag(experiment_id, KIND_TAG, MODEL_TRAINING)
    return key


# -- addresses ------------------------------------------------------------------------------

#: The sidebar's mode: MLflow 3 opens in GenAI mode unless the URL (or the browser's last choice)
#: says otherwise; no server setting chooses it.
TRAINING_SIDEBAR = "workflowType=machine_learning"


def home_url(base: str) -> str:
    return f"{base.rstrip('/')}/#/?{TRAINING_SIDEBAR}"


def runs_url(base: str, experiment_id: str) -> str:
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{TRAINING_SIDEBAR}"


def view_url(base: str, experiment_id: str, key: str, charts: bool = False) -> str:
    """The saved view; ``charts`` opens it on its chart tab (``compareRunsMode=CHART``) rather
    than the runs table."""
    return (
        f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?viewStateShareKey={quote(key)}&{TRAINING_SIDEBAR}"
        + ("&compareRunsMode=CHART" if charts else "")
    )


def artifact_url(base: str, experiment_id: str, run_id: str, path: str) -> str:
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}/artifacts/{path}"
