"""A sweep as the MLflow UI should open it: a saved view of the runs page, and the parent's description.

MLflow 3's runs page reads a saved view from the experiment tag ``mlflow.sharedViewState.<key>``
when opened at ``#/experiments/<id>/runs?viewStateShareKey=<key>``: the same record its own
"Share" and "Save as new view" buttons write (an envelope ``{name, createdAt, updatedAt,
state}`` whose ``state`` is the JSON of the page's search facets and UI state; see
``mlflow/server/js``). initmem writes one per sweep, so the comparison is ready when the page opens.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from typing import Any
from urllib.parse import quote

from initmem_core.vocabulary import CLOCK_SYMBOLS, CLOCKS, GROUP_TAG, KIND_TAG, PARENT_TAG, VIEW_TAG_PREFIX

#: The experiment kind (``KIND_TAG``) that makes the UI show the model-training runs table, not the GenAI overview.
MODEL_TRAINING = "custom_model_development"
#: What a sweep's view shows, in this order.
VIEW_PARAMS = ("sigma", "opt", "lr", "batch_size", "seed")
VIEW_METRICS = ("best_val_test_acc", "tau_interp", "weight_norm_ratio")
PRIMARY_METRIC = "best_val_test_acc"
#: Metrics every finished run has: the parallel-coordinates chart draws only runs holding all its
#: metrics, so tau_interp (logged only when a run interpolates) would empty it.
PARALLEL_METRICS = ("best_val_test_acc", "weight_norm_ratio")
#: The report's plots, as the parent run holds them under ``report/``.
REPORT_PLOTS = (
    "test_acc_vs_sigma.png",
    "weight_norm_vs_epoch.png",
    "spread_vs_clocks.png",
    "tau_interp_vs_sigma.png",
    "memory_vs_epoch.png",
    "memory_vs_clock.png",
)


def view_key(sweep: str) -> str:
    """The share key of a sweep's view: the same for the same sweep, so a relaunch replaces it."""
    return "initmem-" + hashlib.sha256(sweep.encode()).hexdigest()[:12]


def _column(kind: str, key: str) -> str:
    return f"{kind}.`{key}`"  # the runs table's column ids, e.g. params.`sigma`


def view_state(parent_run_id: str) -> dict[str, Any]:
    """The runs page's state: the sweep's child runs, the chosen columns, grouped by group label,
    and charts of test accuracy against sigma."""
    section = "initmem-" + parent_run_id[:8]
    charts = [
        {
            "type": "SCATTER",
            "uuid": f"{section}-acc",
            "metricSectionId": section,
            "isGenerated": False,
            "deleted": False,
            "runsCountToCompare": 1000,
            "displayName": "best_val_test_acc vs sigma",
            "xaxis": {"key": "sigma", "type": "PARAM"},
            "yaxis": {"key": PRIMARY_METRIC, "type": "METRIC"},
        },
        {
            "type": "PARALLEL",
            "uuid": f"{section}-par",
            "metricSectionId": section,
            "isGenerated": False,
            "deleted": False,
            "runsCountToCompare": 1000,
            "showAllRuns": True,
            "selectedParams": ["sigma", "opt", "lr", "batch_size"],
            "selectedMetrics": list(PARALLEL_METRICS),
        },
    ]
    columns = [
        *(_column("params", p) for p in VIEW_PARAMS),
        *(_column("metrics", m) for m in VIEW_METRICS),
        _column("attributes", "Dataset"),
    ]
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
        "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": GROUP_TAG}]},
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


# -- the parent run's description -----------------------------------------------------------


def _pp(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.2f}"


def spread_interval(summary: Any) -> str:
    """The spread's 95% interval (``GroupSummary.spread_lo``/``spread_hi``), or why there is none."""
    low, high = getattr(summary, "spread_lo", math.nan), getattr(summary, "spread_hi", math.nan)
    return "–" if math.isnan(low) or math.isnan(high) else f"[{low:.2f}, {high:.2f}]"


def radial_half_life_text(report: Any, group: str) -> str:
    """The group's radial-memory half-life in epochs and in the clocks that moved, or the horizon
    reached without one (``Report.forgetting``, report/forgetting.py)."""
    found = getattr(report, "forgetting", {}).get(group)
    half = found.half_lives.get("radial") if found is not None else None
    if half is None:
        return "–"
    from initmem_core.report.forgetting import half_life_text

    if not half.reached:
        return half_life_text(half)
    clocks = [f"{CLOCK_SYMBOLS[c]} {getattr(half, c):.3g}" for c in CLOCKS if not math.isnan(getattr(half, c))]
    return " · ".join([f"{half_life_text(half)} ep", *clocks])


def description(report: Any, sweep: str, experiment_id: str, parent_run_id: str, key: str) -> str:
    """Markdown for the parent run (tag ``mlflow.note.content``): the headline table, links to
    the prepared view and to the report's plots. Links are relative: they work on any host."""
    from initmem_core.report.memory import debiased_cell, interval, seeds_needed_cell

    lines = [
        f"**initmem sweep `{sweep}`**: spread = max − min over sigma of the mean test accuracy at "
        "the best-validation checkpoint, in percentage points (the paper's figure, biased upward by noise); "
        "debiased = the cross-fitted spread with its 95% t interval, near 0 for a group that does not "
        "remember (docs/STATISTICS.md); radial half-life = when the slope of log ‖W‖ on log σ first fell to "
        "half its initial value, in epochs [95% interval] and in each clock (report.md has every memory).",
        "",
        "| group | spread pp | 95% interval | debiased pp [95% interval] | best σ | worst σ | failed cells "
        "| radial half-life |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in report.groups:
        lines.append(
            f"| {g.group} | {_pp(g.spread)} | {spread_interval(g)} | {debiased_cell(g)} | "
            f"{'–' if math.isnan(g.best_sigma) else f'{g.best_sigma:g}'} | "
            f"{'–' if math.isnan(g.worst_sigma) else f'{g.worst_sigma:g}'} | {g.failed} | "
            f"{radial_half_life_text(report, g.group)} |"
        )
    unresolved = [p for p in getattr(report, "pairs", []) if p.seeds_needed is not None or p.seeds_needed_note]
    if unresolved:
        lines += [
            "",
            "Not resolved at this scale (debiased spread difference a − b, 95% interval for "
            f"{'the population' if all(p.interval_for == 'population' for p in unresolved) else 'this test set'}): "
            "the seeds per sigma a new sweep needs to resolve it with 80% power if the true difference were the "
            "observed one.",
            "",
            "| a − b | difference pp [95% interval] | next step |",
            "|---|---|---|",
        ]
        lines += [
            f"| {p.a} − {p.b} | {'–' if math.isnan(p.spread_diff) else f'{p.spread_diff:+.2f}'} "
            f"{interval(p.spread_diff_lo, p.spread_diff_hi)} | "
            f"{seeds_needed_cell(p)} |"
            for p in unresolved
        ]
    lines += [
        "",
        f"[Compare the cells (prepared view)]({view_url('', experiment_id, key)}) · "
        f"[its chart of accuracy against sigma]({view_url('', experiment_id, key, charts=True)})",
        "",
        "Report: "
        + " · ".join(
            f"[{plot}]({artifact_url('', experiment_id, parent_run_id, 'report/' + plot)})" for plot in REPORT_PLOTS
        )
        + f" · [report.md]({artifact_url('', experiment_id, parent_run_id, 'report/report.md')})",
    ]
    return "\n".join(lines) + "\n"
