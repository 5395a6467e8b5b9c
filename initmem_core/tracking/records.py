"""What the report is computed from: one record per sweep cell, read back from the tracking store.

``load_sweep_records`` reads only through the MLflow client (params, tags, latest metrics and the
per-epoch history of the figures the forgetting view reads, ``HISTORY_METRICS``), so a report can
be rebuilt from any store, a remote server included.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from initmem_core.config import FIELDS, RunConfig, from_mapping
from initmem_core.errors import ConfigError
from initmem_core.tracking.client import open_client
from initmem_core.tracking.correct_sets import ARTIFACT, decode
from initmem_core.tracking.uris import DEFAULT_EXPERIMENT, resolve_tracking_uri
from initmem_core.vocabulary import (
    BEST_VAL_EPOCH,
    CLOCKS,
    CONFIG_HASH_TAG,
    DIVERGED_TAG,
    ENDED,
    FAILURE_REASON_TAG,
    FINISHED,
    FIT,
    INIT_COSINE,
    PARENT_ROLE,
    PARENT_TAG,
    ROLE_TAG,
    STOP_REASON_TAG,
    SWEEP_TAG,
    TAU_INTERP,
    TEST_ACC,
    TRAIN_ACC,
    VAL_ACC,
    VAL_LOSS,
    WEIGHT_NORM,
)

#: The per-epoch figures kept with their whole history (step = epoch, 0 = initialization): what
#: memory over training is computed from (report/forgetting.py), the clean training accuracy
#: (whether and when a run fit) and the validation figures (whether its selection had converged).
#: One history call each per run.
HISTORY_METRICS = (TEST_ACC, TRAIN_ACC, WEIGHT_NORM, INIT_COSINE, *CLOCKS, VAL_LOSS, VAL_ACC)
#: How a record's ``fit`` was read (``CellRecord.fit_source``), most direct first.
FIT_LOGGED, FIT_FROM_HISTORY, FIT_FROM_SUMMARY = "logged", "training-accuracy history", "tau_interp and final accuracy"


@dataclass
class CellRecord:
    """One cell's outcome. ``metrics`` holds the latest value of every metric the run logged:
    its summary figures (``best_val_test_acc``, ``tau_interp``...) and its final per-epoch ones
    (``weight_norm``, ``clock_sgd``...); fractions stay fractions (accuracy 0..1). ``histories``
    holds, for each of ``HISTORY_METRICS`` the run logged, its values by epoch as sorted
    ``(epoch, value)`` pairs (trained cells only)."""

    config: RunConfig
    status: str = FINISHED
    metrics: dict[str, float] = field(default_factory=dict)
    weight_norms: list[tuple[int, float]] = field(default_factory=list)
    histories: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    error: str = ""
    diverged: bool = False
    run_id: str = ""
    #: which test examples were right at the selected checkpoint (a bool numpy array), when logged
    test_correct: Any = None
    num_classes: int = 0  # the dataset's, for the report's chance level (0: unknown)
    #: the clock convention the run's optimizer followed (its ``clock_convention`` param; "":
    #: not logged, then the report asks the optimizer plugin): what its family is read from
    clock_convention: str = ""
    stop_reason: str = ""  # why the run ended where it did (``STOP_REASON_TAG``; "": not logged)

    def __post_init__(self) -> None:
        if isinstance(self.config, Mapping):
            self.config = from_mapping(self.config, "a record")

    @property
    def trained(self) -> bool:
        """Finished without diverging: only such cells carry a selected predictor."""
        return self.status == FINISHED and not self.diverged

    @property
    def fit(self) -> bool:
        """Whether the selected predictor fit its training set: trained, and its clean training
        accuracy at the best-validation checkpoint at or above ``interp_threshold`` (the run's
        ``fit``; docs/STATISTICS.md, "Which runs fit"). Records of runs that did not log it read it
        off their training-accuracy history or, lacking that (exports before the history was kept),
        as interpolated no later than the selected epoch and still at the threshold at the end
        (``fit_source`` says which)."""
        if not self.trained:
            return False
        source = self.fit_source
        if source == FIT_LOGGED:
            return self.metrics[FIT] >= 0.5
        best, threshold = self.metrics.get(BEST_VAL_EPOCH), self.config.interp_threshold
        if best is None:
            return False
        if source == FIT_FROM_HISTORY:
            return dict(self.histories[TRAIN_ACC])[int(best)] >= threshold
        tau = self.metrics.get(TAU_INTERP)
        return tau is not None and tau <= best and self.metrics.get(TRAIN_ACC, 0.0) >= threshold

    @property
    def fit_source(self) -> str:
        """Where ``fit`` is read from: ``FIT_LOGGED``, ``FIT_FROM_HISTORY`` or ``FIT_FROM_SUMMARY``."""
        if FIT in self.metrics:
            return FIT_LOGGED
        best = self.metrics.get(BEST_VAL_EPOCH)
        if best is not None and int(best) in dict(self.histories.get(TRAIN_ACC, [])):
            return FIT_FROM_HISTORY
        return FIT_FROM_SUMMARY


def fit_counts(cells: Iterable[CellRecord]) -> tuple[int, int]:
    """(runs whose selected predictor fit, runs that ran) among ``cells``: a run that ran to the end
    or diverged (which did not fit); one that failed for another reason (a crash, a kill) is
    missing, not a run that did not fit."""
    done = [c for c in cells if c.status == FINISHED]
    return sum(c.fit for c in done), len(done)


def search_all(client, experiment_ids: list[str], filter_string: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs(experiment_ids, filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


#: Letters, digits and ``_ . , = + : @ / -`` and spaces: a sweep name goes into search filters.
SWEEP_NAME = re.compile(r"[\w.,=+:@/ -]{1,200}")


def check_sweep_name(name: str) -> str:
    """A name that is safe in a search filter and, as ``initmem-output/<name>``, stays in that
    folder: no ``.`` or ``..`` part, no leading ``/``."""
    if not SWEEP_NAME.fullmatch(name) or name.startswith("/") or {".", ".."} & set(name.split("/")):
        raise ConfigError(
            f"sweep name {name!r}: use up to 200 letters, digits, spaces and _ . , = + : @ / -, "
            "with no . or .. between slashes and no leading /"
        )
    return name


def looks_like_run_id(text: str) -> bool:
    return len(text) == 32 and all(c in "0123456789abcdef" for c in text)


def find_parent(client, experiment_id: str, name: str):
    """The parent run of sweep ``name`` in the experiment, or ``None``."""
    runs = client.search_runs(
        [experiment_id],
        f"tags.`{SWEEP_TAG}` = '{check_sweep_name(name)}' and tags.`{ROLE_TAG}` = '{PARENT_ROLE}'",
        max_results=1,
        order_by=["attributes.start_time ASC"],
    )
    return runs[0] if runs else None


def resolve_parent(client, experiment: str, name_or_run_id: str, uri: str = ""):
    """A sweep by name (in ``experiment``) or by its parent run id; ``uri``: the store, which an
    error names."""
    store = f"the tracking store {uri}" if uri else "this tracking store"
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ConfigError(f"experiment '{experiment}' does not exist in {store}; check --experiment and --tracking-uri")
    parent = find_parent(client, found.experiment_id, name_or_run_id)
    if parent is None and looks_like_run_id(name_or_run_id):
        try:
            parent = client.get_run(name_or_run_id)
        except Exception:  # no such run
            parent = None
    if parent is None or parent.data.tags.get(ROLE_TAG) != PARENT_ROLE:
        known = sorted(
            {
                run.data.tags[SWEEP_TAG]
                for run in search_all(client, [found.experiment_id], f"tags.`{ROLE_TAG}` = '{PARENT_ROLE}'")
            }
        )
        listing = f"; sweeps there: {', '.join(known)}" if known else "; it has no sweeps"
        raise ConfigError(
            f"no sweep '{name_or_run_id}' in experiment '{experiment}'{listing} "
            f"(check the name, --experiment and --tracking-uri; looked in {uri or 'this tracking store'})"
        )
    return parent


def child_runs(client, parent) -> list[Any]:
    return search_all(client, [parent.info.experiment_id], f"tags.`{PARENT_TAG}` = '{parent.info.run_id}'")


def open_sweep(uri: str, experiment: str, name_or_parent_run_id: str) -> tuple[Any, Any, list[Any]]:
    """A client on an existing store (none is created), the sweep's parent run (``resolve_parent``)
    and every child run of it."""
    client = open_client(uri, create=False)
    parent = resolve_parent(client, experiment, name_or_parent_run_id, uri)
    return client, parent, child_runs(client, parent)


def latest_per_cell(runs: list[Any]) -> list[Any]:
    """One ended run per config hash: a FINISHED one if any, else the newest (a relaunch retries
    failures). Cells still running are left out: they have not failed, they have not finished."""
    chosen: dict[str, Any] = {}
    ended = [r for r in runs if r.info.status in ENDED]
    for run in sorted(ended, key=lambda r: (r.info.status == FINISHED, r.info.start_time or 0)):
        chosen[run.data.tags.get(CONFIG_HASH_TAG, run.info.run_id)] = run
    return list(chosen.values())


def metric_history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    """``(step, value)`` of one metric, one value per step: the last logged wins (a resumed run
    may log an epoch again)."""
    history = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
    return sorted({m.step: m.value for m in history}.items())


def record_from_run(client, run) -> CellRecord:
    tags = run.data.tags
    trained = run.info.status == FINISHED and tags.get(DIVERGED_TAG) != "true"
    # Only a trained cell's course is read (what memory over training rests on); a failed one
    # gets its weight_norm curve alone, as before.
    wanted = [key for key in HISTORY_METRICS if key in run.data.metrics] if trained else [WEIGHT_NORM]
    histories = {key: metric_history(client, run.info.run_id, key) for key in wanted}
    return CellRecord(
        # every config field is logged as a param, as is
        config=from_mapping({k: v for k, v in run.data.params.items() if k in FIELDS}, "the run's params"),
        status=run.info.status,
        metrics=dict(run.data.metrics),
        weight_norms=histories.get(WEIGHT_NORM, []),
        histories={key: values for key, values in histories.items() if values} if trained else {},
        error=tags.get(FAILURE_REASON_TAG, ""),
        diverged=tags.get(DIVERGED_TAG) == "true",
        run_id=run.info.run_id,
        test_correct=_test_correct(client, run) if run.info.status == FINISHED else None,
        num_classes=int(run.data.params.get("data_num_classes", 0) or 0),
        clock_convention=run.data.params.get("clock_convention", "").partition(":")[0].strip(),
        stop_reason=tags.get(STOP_REASON_TAG, ""),
    )


def _test_correct(client, run):
    """The run's ``test_correct.json`` artifact decoded, or ``None`` (an older run, a lost file)."""
    import os
    import tempfile
    from pathlib import Path

    previous = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # no bar per cell on stderr
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = client.download_artifacts(run.info.run_id, ARTIFACT, folder)
            return decode(Path(path).read_text())
    except Exception:  # absent: the report's intervals are then for this test set only
        return None
    finally:
        if previous is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = previous


def load_sweep_records(
    name_or_parent_run_id: str, tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT
) -> tuple[str, list[CellRecord]]:
    """The sweep's name and one record per cell, read from the tracking store alone."""
    client, parent, children = open_sweep(resolve_tracking_uri(tracking_uri), experiment, name_or_parent_run_id)
    return sweep_name_of(parent), [record_from_run(client, run) for run in latest_per_cell(children)]


def sweep_name_of(parent) -> str:
    """The parent run's sweep name, which callers turn into a folder: anyone who can write to a
    shared store can set this tag, so a name that would lead out of that folder is refused."""
    name = parent.data.tags.get(SWEEP_TAG, "")
    try:
        return check_sweep_name(name)
    except ConfigError:
        raise ConfigError(
            f"run {parent.info.run_id} carries an unsafe sweep name in its tag {SWEEP_TAG} "
            f"({name[:80]!r}); refusing to use it as a folder name"
        ) from None
