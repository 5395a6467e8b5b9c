"""A sweep's runs in the tracking store: its parent run and the child run of each cell.

``SweepRuns`` is every store operation a sweep launch makes, written once, so that the sweep
package never holds an MLflow client.

>>> runs = SweepRuns(uri, "initmem", "my-sweep")  # the parent found by name, or created
>>> run_id = runs.create_child("sigma=0.5", {...})
>>> runs.end(FINISHED)
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initmem_core.tracking.cells import quiet_run_links
from initmem_core.tracking.client import ensure_experiment, open_client
from initmem_core.tracking.provenance import source_tags
from initmem_core.tracking.records import (
    CellRecord,
    child_runs,
    find_parent,
    latest_per_cell,
    record_from_run,
)
from initmem_core.tracking.system_metrics import SystemMetrics
from initmem_core.tracking.ui_view import write_view
from initmem_core.tracking.writing import log_in_batches, log_params, log_tags, to_json
from initmem_core.vocabulary import (
    CURVES_DIGEST_TAG,
    CURVES_SECTION_PREFIX,
    CURVES_TAG,
    GROUP_LABEL_TAG,
    GROUP_TAG,
    PARENT_ROLE,
    ROLE_TAG,
    RUNNING,
    SCHEDULED,
    SWEEP_TAG,
)

#: A metric key in one report's section of the parent's charts: ``report-<n>/<key>``.
_SECTION = re.compile(rf"{re.escape(CURVES_SECTION_PREFIX)}(\d+)/")
#: The longest param value MLflow stores; a sweep's grid can list more values than that.
PARAM_VALUE_LIMIT = 6000
#: Where the report's files go on the parent run, and the sweep's grid beside them.
REPORT_FOLDER, GRID_FILE = "report", "sweep.json"


@dataclass(frozen=True)
class StoredRun:
    """A run as the store holds it: what a launch reads of an earlier launch's children."""

    run_id: str
    name: str
    status: str
    tags: Mapping[str, str]
    params: Mapping[str, str]

    @classmethod
    def of(cls, run: Any) -> StoredRun:
        info, data = run.info, run.data
        return cls(info.run_id, info.run_name or "", info.status, dict(data.tags), dict(data.params))


class SweepRuns:
    """The parent run of sweep ``name`` in ``experiment`` (created if the store has none, set
    RUNNING again if it has: a relaunch) and the child runs under it.

    ``admit``: called with an existing parent's tags and params before anything is written; it
    raises to refuse the relaunch (``sweep.identity``: another grid under the same name)."""

    def __init__(
        self,
        uri: str,
        experiment: str,
        name: str,
        admit: Callable[[Mapping[str, str], Mapping[str, str]], None] | None = None,
    ):
        self.uri, self.name = uri, name
        quiet_run_links()
        self._client = open_client(uri)
        self.experiment_id: str = ensure_experiment(self._client, uri, experiment)
        #: MLflow's source tags of this launch (the command, the user, the git commit it runs at).
        self.source = source_tags()
        parent = find_parent(self._client, self.experiment_id, name)
        if parent is None:
            parent = self._client.create_run(
                self.experiment_id, run_name=name, tags={**self.source, SWEEP_TAG: name, ROLE_TAG: PARENT_ROLE}
            )
        else:  # a relaunch: the parent says which code ran last
            if admit is not None:
                admit(dict(parent.data.tags), dict(parent.data.params))
            self._client.update_run(parent.info.run_id, status=RUNNING)
            log_tags(self._client, parent.info.run_id, self.source)
        self._parent = parent
        self.parent_id: str = parent.info.run_id
        #: The parent's status before this launch: a launch that runs nothing puts it back.
        self.status_before: str = parent.info.status

    # -- the parent run ----------------------------------------------------------------------

    def parent_params(self) -> dict[str, str]:
        """The params the parent holds now (every launch's grid adds those it lacked)."""
        return dict(self._client.get_run(self.parent_id).data.params)

    def parent_tags(self) -> dict[str, str]:
        return dict(self._client.get_run(self.parent_id).data.tags)

    def add_parent_params(self, params: Mapping[str, str]) -> None:
        """Log params onto the parent, each value cut to MLflow's limit. MLflow never changes a
        logged param: pass only those the parent lacks (``parent_params``)."""
        log_params(self._client, self.parent_id, {key: value[:PARAM_VALUE_LIMIT] for key, value in params.items()})

    def log_report(self, files: Iterable[Path], grid: Mapping[str, Any]) -> None:
        """The report's files into the parent's ``report/`` artifacts, and the sweep's grid as ``sweep.json``."""
        for path in files:
            self._client.log_artifact(self.parent_id, str(path), REPORT_FOLDER)
        self._client.log_text(self.parent_id, to_json(grid), GRID_FILE)

    def log_figures(self, figures: Mapping[str, float], curves: Iterable[tuple[str, float, int]]) -> None:
        """Metrics onto the parent: ``figures`` at step 0, ``curves`` as ``(key, value, step)``.
        Stamped with the time, so a relaunch's value is the parent's latest at each step (with one
        timestamp for every launch, MLflow's latest is the largest ever logged).

        The curves go into a section of the parent's charts of their own, ``report-<n>/<key>``:
        MLflow's metrics are append-only, so a relaunch whose curves differ (a cell run again,
        cells added) would draw its points beside an earlier launch's at every step of one chart.
        A relaunch whose curves are the latest section's logs none; the tag ``initmem.curves``
        names the latest section."""
        from mlflow.entities import Metric

        curves = sorted(curves)
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, 0) for key, value in figures.items()]
        parent = self._client.get_run(self.parent_id).data
        digest = hashlib.sha256(repr(curves).encode()).hexdigest()[:16]
        section = ""
        if curves and parent.tags.get(CURVES_DIGEST_TAG) != digest:
            section = f"{CURVES_SECTION_PREFIX}{last_section(parent.metrics) + 1}"
            metrics += [Metric(f"{section}/{key}", value, now, step) for key, value, step in curves]
        log_in_batches(self._client, self.parent_id, "metrics", metrics)
        if section:  # only once every point is in: a launch killed half-way leaves the tag on the whole earlier section
            log_tags(self._client, self.parent_id, {CURVES_TAG: section, CURVES_DIGEST_TAG: digest})

    def write_view(self) -> str:
        """The sweep's prepared view in the MLflow UI (``ui_view``); returns its share key."""
        return write_view(self._client, self.experiment_id, self.name, self.parent_id)

    def set_parent_tags(self, tags: Mapping[str, str]) -> None:
        log_tags(self._client, self.parent_id, tags)

    def end(self, status: str) -> None:
        self._client.set_terminated(self.parent_id, status)

    # -- the children ------------------------------------------------------------------------

    def children(self) -> list[StoredRun]:
        """Every child run of the sweep, from every launch."""
        return [StoredRun.of(run) for run in child_runs(self._client, self._parent)]

    def label_children(self, labels: Mapping[str, str]) -> None:
        """Each child's group label tag (``GROUP_LABEL_TAG``) from ``labels`` (group key -> label),
        where it reads otherwise."""
        for run in self.children():
            label = labels.get(run.tags.get(GROUP_TAG, ""))
            if label is not None and run.tags.get(GROUP_LABEL_TAG) != label:
                self._client.set_tag(run.run_id, GROUP_LABEL_TAG, label)

    def create_child(self, run_name: str, tags: Mapping[str, str]) -> str:
        """A new child run (RUNNING, as MLflow creates a run); returns its id."""
        return self._client.create_run(self.experiment_id, run_name=run_name, tags={**self.source, **tags}).info.run_id

    def schedule(self, run_id: str) -> None:
        """Show a child SCHEDULED: handed to an executor, not started by a worker yet."""
        self._client.update_run(run_id, status=SCHEDULED)

    def monitor_system(self) -> SystemMetrics:
        """MLflow's system metrics of this machine on the parent run, until ``finish()``."""
        return SystemMetrics(self.uri, self.parent_id, resume=True)  # a relaunch goes on after its steps

    def cell_records(self) -> list[CellRecord]:
        """One record per cell (its latest ended run), what the report is built from."""
        return [record_from_run(self._client, run) for run in latest_per_cell(child_runs(self._client, self._parent))]


def last_section(metrics: Mapping[str, float]) -> int:
    """The highest ``n`` of the ``report-<n>/`` sections among a parent's metric keys; 0 if none.
    Counted from the keys, not the tag: a launch killed while it logged leaves a section the next skips."""
    found = (_SECTION.match(key) for key in metrics)
    return max((int(match.group(1)) for match in found if match), default=0)


def current_curves(metrics: Mapping[str, Any], tags: Mapping[str, str]) -> dict[str, Any]:
    """A parent's metrics as its latest report logged them: the figures, and the curves of the
    section ``initmem.curves`` names under their own keys (the earlier sections left out)."""
    section = tags.get(CURVES_TAG, "") + "/"
    return {
        key.removeprefix(section): value
        for key, value in metrics.items()
        if key.startswith(section) or not _SECTION.match(key)
    }
