"""``run``: one training run from a config, tracked in MLflow. The CLI's ``initmem run`` calls it.

The run is planned once (``training.plan.plan_run``: the config checked, the store's URI, the
hash, the params and the checkpoint folder derived) and every component built before the
tracked run is created: bad input (a checkpoint to resume included) leaves no run in the store.
The store itself is opened meanwhile by a helper process (``tracking.tracker_process``), so a
bad input found while the data is read may leave a new, empty store behind. Once the run
exists, any failure marks it FAILED (a divergence is tagged ``diverged=true``), SIGTERM, SIGHUP
and Ctrl-C write a checkpoint and mark it KILLED, and the exception is re-raised.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from initmem_core.config import RunConfig, from_mapping
from initmem_core.errors import ConfigError, Diverged, InitmemError, RunWarning
from initmem_core.plugin_system.loader import get_registry
from initmem_core.plugin_system.registry import Registry
from initmem_core.tracking.cells import LEASES_FOLDER, CellLeases, table_tags
from initmem_core.tracking.locks import lock_holder
from initmem_core.tracking.paths import check_writable_folder
from initmem_core.tracking.provenance import installed_version
from initmem_core.tracking.system_metrics import require_psutil
from initmem_core.tracking.tracker import TESTING, TRAINING, VALIDATION, MemoryTracker, MlflowTracker, Tracker
from initmem_core.tracking.tracker_process import OpeningAbandoned, TrackerProcess
from initmem_core.tracking.uris import (
    DEFAULT_EXPERIMENT,
    check_experiment_name,
    check_tracking_uri,
    resolve_tracking_uri,
    store_folder,
)
from initmem_core.tracking.writing import to_json
from initmem_core.training.checkpoint_format import header
from initmem_core.training.checkpoint_store import CheckpointStore
from initmem_core.training.environment import SYSTEM_ARTIFACT, system_description
from initmem_core.training.plan import RunPlan, plan_run
from initmem_core.training.resume import resume_candidates
from initmem_core.training.selection import stopping
from initmem_core.training.stop_signals import NOT_TRACKED, Stopped, StopSignals
from initmem_core.vocabulary import (
    COMPILE_FALLBACKS_TAG,
    CONFIG_HASH_TAG,
    DIVERGED_EPOCH_TAG,
    DIVERGED_TAG,
    FAILED,
    FAILURE_REASON_TAG,
    FINISHED,
    KILLED,
    STOP_REASON_TAG,
    STOPPED_BY_TAG,
)

if TYPE_CHECKING:  # both import torch, which run() imports only once it builds the setup
    from initmem_core.contracts import DatasetBundle
    from initmem_core.training.setup import TrainingSetup


@dataclass
class RunResult:
    config: RunConfig
    run_id: str | None
    status: str
    summary: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    model: Any = None
    checkpoint_seconds: float = 0.0  # what checkpoints cost the training thread (writes overlap training)
    unsynced: str = ""  # writes the store did not take (it shows the run RUNNING until `initmem sync`)
    #: Some writes could not even be kept for `initmem sync`: a --resume from ``checkpoint`` records them.
    lost: bool = False
    checkpoint: str | None = None  # the run's last checkpoint, if it keeps any
    config_hash: str = ""  # the run's (its plan's)
    stop_reason: str = ""  # why it ended at its last epoch (``STOP_REASON_TAG``: patience, until, epochs)


def run_params(plan: RunPlan, setup: TrainingSetup) -> dict[str, Any]:
    """The plan's params (as a sweep's cell logs them), plus what the built run resolved and
    which packages provided it."""
    params: dict[str, Any] = dict(plan.params)
    params["train_eval_examples"] = setup.eval_loaders["train"].num_examples  # the --train-eval-size cap applied
    params["data_num_classes"] = setup.dataset.num_classes  # the report's chance level
    if plan.config.until:  # the epochs the target set (``epochs`` stays the cap given, as the sweep logged it)
        params["resolved_epochs"] = plan.trains.epochs
    params["resolved_device"] = str(setup.device)
    params["num_params"] = sum(p.numel() for p in setup.model.parameters())
    params["augment_resolved"] = setup.train_loader.augment
    for split, size in setup.dataset.sizes().items():
        params[f"data_{split}_size"] = size
    for package in ("initmem", "torch", "torchvision", "timm", "mlflow"):
        params[f"version.{package}"] = installed_version(package)
    # What the optimizer actually uses, defaults included (e.g. Muon's momentum), as logged truth.
    for key, value in setup.optimizer.defaults.items():
        if isinstance(value, (int, float, str, bool, tuple)) or value is None:
            params[f"optimizer.{key}"] = value
    for kind, component in plan.components.items():
        params[f"provider.{kind}"] = f"{component.spec.provider.package} {component.spec.provider.version}"
    return params


def dataset_inputs(config: RunConfig, dataset: DatasetBundle) -> list[tuple[str, str, dict[str, Any], str]]:
    """(name, digest, profile, context) of each split a run reads: training, validation and
    testing, as MLflow names them. A split's digest covers its images and labels, so two runs
    with the same digest saw the same examples; ``data_digest`` in each profile covers all three."""
    import hashlib

    splits = {
        TRAINING: (dataset.train_x, dataset.train_y),
        VALIDATION: (dataset.val_x, dataset.val_y),
        TESTING: (dataset.test_x, dataset.test_y),
    }
    whole = hashlib.sha256()
    digests = {}
    for context, tensors in splits.items():
        digest = hashlib.sha256()
        for tensor in tensors:
            for hashed in (digest, whole):
                hashed.update(str(tuple(tensor.shape)).encode())
                hashed.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        digests[context] = digest.hexdigest()[:16]
    shared = {"num_classes": dataset.num_classes, "data_seed": config.data_seed, "data_digest": whole.hexdigest()[:16]}
    return [
        (config.data, digests[context], {"size": len(labels), **shared}, context)
        for context, (_, labels) in splits.items()
    ]


def open_run(
    plan: RunPlan, setup: TrainingSetup, tracker: Tracker, tags: Mapping[str, str] | None, resume: bool
) -> tuple[str, CheckpointStore | None, dict[str, Any] | None]:
    """Start the run, or reopen the one of the newest checkpoint; returns (run id, its checkpoint
    store or ``None``, the state to resume from or ``None``). Checkpoint problems raise first.
    ``open_run``, ``log_run_files``, ``finish_run``, ``end_run`` and ``fail_run`` are a run's
    stages in the store, whoever trains it (``run``, a lockstep job's models)."""
    config = plan.config
    checkpoints: CheckpointStore | None
    if resume:
        if plan.checkpoints is None:
            raise ConfigError(
                "--resume needs checkpoints, which this run does not keep "
                "(--checkpoint-every 0, or no tracking without --checkpoint-dir)"
            )
        checkpoints, state = _reopen_unfinished(plan, tracker)
        # Metrics are written in batches: a run killed outright may not have written the last
        # epochs before its checkpoint. The checkpoint has them; the tracker skips steps it holds.
        for row in state["history"]:
            tracker.log_metrics({key: value for key, value in row.items() if key != "epoch"}, int(row["epoch"]))
        return state["run_id"], checkpoints, state
    params = run_params(plan, setup)
    run_tags = {
        "arch": config.arch,
        "opt": config.opt,
        **table_tags(params),
        CONFIG_HASH_TAG: plan.config_hash,
        **(tags or {}),
    }
    run_id = tracker.start_run(plan.name, params, run_tags)
    for split in dataset_inputs(config, setup.dataset):
        tracker.log_dataset(*split)
    checkpoints = CheckpointStore(plan.checkpoints, config.keep_checkpoints) if plan.checkpoints else None
    if checkpoints:
        # --patience: the newest checkpoint may be of a run that stopped there; its history says so
        checkpoints.start_fresh(plan.trains.epochs, lambda history: stopping(plan.trains, plan.min_epochs, history))
    return run_id, checkpoints, None


def _reopen_unfinished(plan: RunPlan, tracker: Tracker) -> tuple[CheckpointStore, dict[str, Any]]:
    """Reopen the run of the newest checkpoint of the plan's config whose run is not finished: the
    newest one's, or, if that run finished, one a later run set aside (``resume.resume_candidates``),
    so a run whose process died can be resumed whatever another run of its config did since."""
    assert plan.checkpoints is not None
    refusal: InitmemError | None = None
    for checkpoints, state in resume_candidates(plan.checkpoints, plan.config, plan.config_hash):
        try:
            tracker.resume_run(state["run_id"])
        except InitmemError as error:  # finished, or not in this store: an earlier one may still be open
            refusal = refusal or error
            continue
        return checkpoints, state
    assert refusal is not None  # resume_candidates yields at least one, or raises
    raise refusal


def run(
    config: RunConfig | Mapping[str, Any] | None = None,
    *,
    tracking: bool = True,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    tracker: Tracker | None = None,
    parent_run_id: str | None = None,
    tags: Mapping[str, str] | None = None,
    progress: Any = None,
    registry: Registry | None = None,
    resume: bool = False,
    helper_process: bool | None = None,
    system_metrics: bool = False,
    **overrides: Any,
) -> RunResult:
    """Train one model and track it.

    >>> from initmem_core import run
    >>> result = run(arch="resnet20", opt="muon", sigma=2.0, epochs=5, tracking=False)
    >>> result.summary["best_val_test_acc"]

    ``config`` may be a ``RunConfig`` or a mapping; keyword ``overrides`` replace its values.
    With ``tracking=False`` nothing is written anywhere (a ``MemoryTracker`` records the run, and
    there are no checkpoints unless ``checkpoint_dir`` is set). ``resume``: continue the run of the
    newest checkpoint of this config, logging only the steps it does not hold yet. Raises
    ``InitmemError`` for bad input before anything is tracked, ``Diverged`` for a run that
    diverged and ``Stopped`` (a ``KeyboardInterrupt``) after SIGTERM, SIGHUP or Ctrl-C.

    ``helper_process``: track through a helper process that imports MLflow, opens the store and
    writes on another core; ``None`` (the default) chooses it when MLflow is not imported in this
    process yet (in a notebook that has it, tracking in process costs less). ``system_metrics``:
    MLflow's system metrics of this machine on the run (a sweep records them on its parent run,
    so its cells, given a ``tracker``, ignore this).
    """
    registry = registry or get_registry()
    if isinstance(config, RunConfig):
        config = config.replace(**overrides) if overrides else config
    else:
        config = from_mapping({**dict(config or {}), **overrides})
    plan = plan_run(config, registry, _store_uri(tracker, tracking, tracking_uri))
    if tracker is None and tracking:
        check_experiment_name(experiment)
    if plan.checkpoints is not None:  # a bad folder fails in one line, before anything is built
        check_writable_folder(plan.checkpoints.parent, "--checkpoint-dir")
    if system_metrics:
        if not tracking:
            raise ConfigError("--system-metrics records into the tracking store: it needs tracking (no --no-tracking)")
        require_psutil()
    owned = tracker is None
    # A sweep holds its cells' leases itself (and passes the tracker); anyone else takes one here.
    lease = _take_lease(plan, resume) if owned and tracking else None
    try:
        if tracker is None:  # first: a helper process sets the store up while the setup is built
            tracker = _new_tracker(plan.store_uri, experiment, parent_run_id, helper_process, system_metrics)
        freeze = gc.get_freeze_count() == 0  # a caller that froze objects itself keeps its own scheme
        try:
            with contextlib.ExitStack() as kept:
                with _setup_out_of_the_collectors_way(freeze):
                    from initmem_core.training.setup import build_setup, process_settings_kept  # lazy: torch

                    kept.enter_context(process_settings_kept())  # threads, determinism, TF32: as they were after
                    setup = build_setup(plan)
                return _train_tracked(plan, setup, tracker, tags, progress, resume)
        finally:
            if freeze:
                gc.unfreeze()
            if owned:  # a helper process ends once its run has, or when the run never began
                tracker.close()
    finally:
        if lease is not None:
            lease.release()


def _store_uri(tracker: Tracker | None, tracking: bool, tracking_uri: str | None) -> str | None:
    """The store the run writes to, resolved and checked once: a given tracker's, else the one
    ``tracking_uri`` names (``None`` without tracking)."""
    if tracker is not None:
        return tracker.uri
    return check_tracking_uri(resolve_tracking_uri(tracking_uri)) if tracking else None


def _take_lease(plan: RunPlan, resume: bool):
    """The run's lease: the lock a sweep takes for a cell of this config (``CellLeases``), held
    until the run ends and dropped by the kernel if its process dies. Held by another live
    process, a second run of the config, or a resume of the one still running, is refused in
    one line naming that process; once its owner is dead, a run can always be resumed."""
    folder = store_folder(plan.store_uri) / LEASES_FOLDER
    if not folder.parent.is_dir():  # opening the store says what is wrong: nothing is made here first
        return None
    lease = CellLeases(folder)
    try:
        if lease.take(plan.config_hash):
            return lease
    except OSError:  # a read-only folder: opening the store says so, in its own words
        return None
    holder = lock_holder(folder / f"{plan.config_hash}.lock") or "another live process"
    if resume:
        raise ConfigError(
            f"the run of this config is still running in {holder}; stop it first (Ctrl-C or SIGTERM "
            "checkpoints it), then --resume"
        )
    raise ConfigError(
        f"{plan.name} is already running in {holder}; wait for it to end, or change a value "
        "(such as --seed) to run another"
    )


@contextlib.contextmanager
def _setup_out_of_the_collectors_way(freeze: bool) -> Iterator[None]:
    """Importing torch and building the run create millions of objects that live as long as the
    run: the cycle collector would scan them over and over (about 0.5 s of a short CPU run here).
    It is held off while they are made, and they are frozen out of its scans until the run ends
    (``gc.freeze``; ``run`` unfreezes them). Reference counting frees things as usual meanwhile."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


def _new_tracker(
    uri: str | None, experiment: str, parent_run_id: str | None, helper_process: bool | None, system_metrics: bool
) -> Tracker:
    if uri is None:
        return MemoryTracker()
    if helper_process or (helper_process is None and "mlflow" not in sys.modules and os.name == "posix"):
        return TrackerProcess(uri, experiment, parent_run_id=parent_run_id, system_metrics=system_metrics)
    return MlflowTracker(uri, experiment, parent_run_id=parent_run_id, system_metrics=system_metrics)


def _train_tracked(
    plan: RunPlan, setup: TrainingSetup, tracker: Tracker, tags: Mapping[str, str] | None, progress: Any, resume: bool
) -> RunResult:
    from initmem_core.training import compiling  # lazy: imports torch
    from initmem_core.training.loop import train  # lazy: imports torch

    config = plan.config
    # Installed before the run exists and kept until it is ended: no signal leaves it RUNNING.
    with StopSignals() as stop:
        # A helper still opening the store asks this: a signal then ends it at once.
        tracker.give_up_opening = lambda: stop.signum
        try:
            run_id, checkpoints, resume_from = open_run(plan, setup, tracker, tags, resume)
        except OpeningAbandoned as gave_up:  # a signal before the helper began to open it: no run
            raise Stopped(gave_up.signum, status=NOT_TRACKED) from None
        save = (
            (lambda state: checkpoints.save({**header(config, plan.config_hash, run_id), **state}))
            if checkpoints
            else None
        )
        try:
            if stop.requested:  # came while the run was being opened: end it before anything trains
                assert stop.signum is not None  # requested: a signal came
                kept = checkpoints.previous if checkpoints and resume_from is not None else None
                raise Stopped(stop.signum, str(kept) if kept else None)
            log_run_files(plan, setup, tracker)
            fallbacks_before = compiling.fallbacks()
            history, summary = train(
                setup, tracker.log_metrics, progress, save_checkpoint=save, resume_from=resume_from, stop=stop
            )
            if config.compile:
                _record_fallbacks(tracker, config, compiling.fallbacks() - fallbacks_before)
            stop.finishing = True  # trained: a signal now waits until the run is written
            reason = finish_run(plan, setup, tracker, checkpoints, history, summary)
            status = FINISHED
            result = RunResult(
                config,
                run_id,
                status,
                summary,
                history,
                setup.model,
                checkpoints.seconds_waited if checkpoints else 0.0,
                config_hash=plan.config_hash,
                stop_reason=reason,
            )
        except BaseException as error:
            stop.finishing = True
            # Whoever reports the error must say what the store holds: the end may not be there yet.
            status, error.unsynced = fail_run(tracker, checkpoints, error)  # type: ignore[attr-defined]
            error.lost = tracker.lost  # type: ignore[attr-defined]
            error.run_id = run_id  # type: ignore[attr-defined]
            error.config_hash = plan.config_hash  # type: ignore[attr-defined]
            raise
        unsynced = end_run(tracker, checkpoints, status)
    result.unsynced, result.lost = unsynced, tracker.lost
    result.checkpoint = str(checkpoints.previous) if checkpoints and checkpoints.previous else None
    if stop.requested:  # the signal came while the finished run was being written: stop now
        assert stop.signum is not None  # requested: a signal came
        stopped = Stopped(stop.signum, status=FINISHED)
        stopped.unsynced = unsynced
        raise stopped
    return result


def _record_fallbacks(tracker: Tracker, config: RunConfig, count: int) -> None:
    """``--compile``: the run's tag says how often TorchDynamo fell back to eager while it trained
    (``training.compiling``), and a fallback is warned about, never silent."""
    tracker.set_tags({COMPILE_FALLBACKS_TAG: str(count)})
    if count:
        warnings.warn(
            f"--compile: TorchDynamo gave up compiling {count} time(s) while {config.run_name()} trained and "
            "ran those frames eagerly (its recompile limit was reached); the run is correct but slower. "
            'TORCH_LOGS="recompiles" says why it recompiled',
            RunWarning,
            stacklevel=4,
        )


def log_run_files(plan: RunPlan, setup: TrainingSetup, tracker: Tracker) -> None:
    """What a run logs as it trains (again on a resume: the first attempt may not have got them
    into the store): its config, the machine it runs on (a resume's may differ), and the parameter
    groups its optimizer may record (optional: ``contracts.OptimizerFactory``)."""
    tracker.log_text(to_json(plan.config.to_dict()), "config.json")
    tracker.log_text(to_json(system_description()), SYSTEM_ARTIFACT)
    groups = getattr(setup.optimizer, "initmem_param_groups", None)
    if groups:
        tracker.log_text(to_json(groups), "optimizer_param_groups.json")


def finish_run(
    plan: RunPlan,
    setup: TrainingSetup,
    tracker: Tracker,
    checkpoints: CheckpointStore | None,
    history: list[dict[str, float]],
    summary: dict[str, float],
) -> str:
    """The end of a run trained to where it stops, before ``end_run`` ends it FINISHED: its summary
    (at its last epoch: --until or --patience may have set it), why it stopped (returned, and
    tagged), the metrics' artifacts and the final weights, and its last checkpoint on disk (a run
    is not FINISHED before it is), then kept as --keep-checkpoints says."""
    tracker.log_metrics(summary, step=int(history[-1]["epoch"]))
    reason = str(stopping(plan.trains, plan.min_epochs, history))
    tracker.set_tags({STOP_REASON_TAG: reason})
    _log_final_artifacts(tracker, setup)  # while the last checkpoint is being written
    if checkpoints:
        checkpoints.wait()
        checkpoints.finish()
    return reason


def fail_run(tracker: Tracker, checkpoints: CheckpointStore | None, error: BaseException) -> tuple[str, str]:
    """End the run as ``error`` ends it, why tagged: KILLED by Ctrl-C or a signal, else FAILED (a
    divergence tagged ``diverged=true``); returns its status and what the store did not take (``end_run``)."""
    if isinstance(error, KeyboardInterrupt):  # Stopped is one: a signal
        if isinstance(error, Stopped):
            tracker.set_tags({STOPPED_BY_TAG: error.signal_name})
        return KILLED, end_run(tracker, checkpoints, KILLED)
    if isinstance(error, Diverged):
        where = {DIVERGED_EPOCH_TAG: str(error.epoch)}
        if error.step is not None:
            where["diverged_step"] = str(error.step)
        tracker.set_tags({DIVERGED_TAG: "true", **where, FAILURE_REASON_TAG: str(error)})
    else:
        tracker.set_tags({FAILURE_REASON_TAG: f"{type(error).__name__}: {error}"[:5000]})
    return FAILED, end_run(tracker, checkpoints, FAILED)


def end_run(tracker: Tracker, checkpoints: CheckpointStore | None, status: str) -> str:
    """End the run in the store; returns what the store did not take (empty when it took all).
    A stopped or failed run leaves no write behind: its last checkpoint is on disk (or said to be
    missing) before the run ends and its exception reaches the caller."""
    if checkpoints:
        try:
            checkpoints.wait()
        except Exception as error:
            warnings.warn(
                f"the last checkpoint could not be written ({type(error).__name__}: {error}); "
                "a resume would start from the one before",
                RunWarning,
                stacklevel=2,
            )
    tracker.end_run(status)
    return tracker.unsynced


def _log_final_artifacts(tracker: Tracker, setup: TrainingSetup) -> None:
    import torch

    for metric in setup.metrics.values():
        # artifacts() is optional for a metric (contracts.Metric).
        for name, text in getattr(metric, "artifacts", lambda: {})().items():
            tracker.log_text(text, name)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "final_weights.pt"
        # Plain CPU tensors: it loads with torch.load(path, weights_only=True) on any machine, GPU or not.
        torch.save({name: tensor.detach().cpu() for name, tensor in setup.model.state_dict().items()}, path)
        tracker.log_artifact(path)
