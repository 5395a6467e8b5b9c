"""Names every layer shares, spelled here once: the forgetting clocks (``training.clocks``), the
metrics, a run's statuses (MLflow's) and the keys of the tags initmem writes and reads. Imports
nothing, so every layer and the CLI may import it.
"""

from __future__ import annotations

#: The metric each clock is logged as: T_SGD, T_L2 and T_adapt, in the paper's order.
CLOCK_SGD, CLOCK_L2, CLOCK_ADAPT = "clock_sgd", "clock_l2", "clock_adapt"
CLOCKS = (CLOCK_SGD, CLOCK_L2, CLOCK_ADAPT)

#: The paper's symbol for each clock, as messages and tables name it.
CLOCK_SYMBOLS = {CLOCK_SGD: "T_SGD", CLOCK_L2: "T_L2", CLOCK_ADAPT: "T_adapt"}

#: The symbol with its definition, for a plot's axis.
CLOCK_FORMULAS = {CLOCK_SGD: "T_SGD = Σ η² / b", CLOCK_L2: "T_L2 = λ Σ η", CLOCK_ADAPT: "T_adapt = Σ η"}


#: The two families of optimizers, by how they forget: a step proportional to the gradient (SGD
#: and its momentum variants) forgets through T_SGD and T_L2; a step of size about lr whatever
#: the gradient's scale (adaptive and normalised methods: Adam, AdamW, Muon, Lion) through
#: T_adapt. An optimizer's family follows from the clock convention it declares
#: (``initmem_core.training.clocks.CONVENTION_FAMILIES``).
SGD_FAMILY, ADAPTIVE_FAMILY = "sgd-like", "adaptive"


def clock_metric(short: str) -> str:
    """``"sgd"`` -> ``"clock_sgd"``: the metric of a ``ForgettingClocks`` field."""
    name = f"clock_{short}"
    if name not in CLOCKS:
        raise KeyError(name)
    return name


# -- metric names ---------------------------------------------------------------------------

#: What the training loop logs of each split at every evaluation point (``train_*`` on the clean
#: training set), and the learning rate.
TRAIN_LOSS, TRAIN_ACC = "train_loss", "train_acc"
VAL_LOSS, VAL_ACC = "val_loss", "val_acc"
TEST_LOSS, TEST_ACC = "test_loss", "test_acc"
LR = "lr"
#: The weight-norms metric's figures (plugins/metrics/weight_norms.py).
WEIGHT_NORM, WEIGHT_NORM_RATIO = "weight_norm", "weight_norm_ratio"
INIT_DISTANCE, INIT_COSINE = "init_distance", "init_cosine"
WEIGHT_NORMS = (WEIGHT_NORM, WEIGHT_NORM_RATIO, INIT_DISTANCE, INIT_COSINE)
#: Every figure a run with the built-in metrics logs at every evaluation point, epoch 0 included.
PER_EPOCH_METRICS = (TRAIN_LOSS, TRAIN_ACC, VAL_LOSS, VAL_ACC, TEST_LOSS, TEST_ACC, *WEIGHT_NORMS, *CLOCKS, LR)
#: A run's summary (plugins/metrics/selection.py, training/selection.py): the selected predictor
#: (the lowest validation loss over epochs >= 1) and the last epoch's test accuracy; interpolation's
#: epoch and repair gap; whether the selected predictor fit its training set.
BEST_VAL_EPOCH, BEST_VAL_LOSS = "best_val_epoch", "best_val_loss"
BEST_VAL_TEST_ACC, FINAL_TEST_ACC = "best_val_test_acc", "final_test_acc"
BEST_VAL_TRAIN_ACC = "best_val_train_acc"
TEST_EXAMPLES, BEST_VAL_TEST_ACC_CAPPED = "test_examples", "best_val_test_acc_capped"
SELECTION_METRICS = (
    BEST_VAL_EPOCH,
    BEST_VAL_LOSS,
    BEST_VAL_TEST_ACC,
    BEST_VAL_TRAIN_ACC,
    FINAL_TEST_ACC,
    TEST_EXAMPLES,
)
TAU_INTERP, REPAIR_GAP, FIT = "tau_interp", "repair_gap", "fit"
#: Where a run stopped (a summary metric) and why (``STOP_REASON_TAG``): its validation loss stopped
#: improving (``--patience``), it reached its ``--until`` target, or its ``--epochs`` (the cap).
STOP_EPOCH = "stop_epoch"
STOP_PATIENCE, STOP_UNTIL, STOP_EPOCHS = "patience", "until", "epochs"


# -- run statuses ---------------------------------------------------------------------------

#: MLflow's statuses of a run, as a tracker ends a run with and a sweep reads them back.
FINISHED, FAILED, KILLED, RUNNING, SCHEDULED = "FINISHED", "FAILED", "KILLED", "RUNNING", "SCHEDULED"
#: The statuses of a run that has ended.
ENDED = (FINISHED, FAILED, KILLED)
#: A sweep cell's status before it has run (a ``CellOutcome``'s, never a stored run's).
PENDING = "PENDING"

# -- tag keys -------------------------------------------------------------------------------

#: MLflow's own tags: a child run's parent, a run's description (Markdown), an experiment's kind,
#: the prefix of the experiment tags holding the UI's saved views, a dataset input's context.
PARENT_TAG = "mlflow.parentRunId"
NOTE_TAG = "mlflow.note.content"
KIND_TAG = "mlflow.experimentKind"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
DATASET_CONTEXT_TAG = "mlflow.data.context"

#: A run's config hash (a tag, and a param of the same name): a sweep finds a cell's runs by it.
CONFIG_HASH_TAG = "config_hash"
#: How a run ended early: ``"true"`` when its loss diverged, and at which epoch; the error; the
#: signal that stopped it.
DIVERGED_TAG, DIVERGED_EPOCH_TAG = "diverged", "diverged_epoch"
FAILURE_REASON_TAG = "failure_reason"
STOPPED_BY_TAG = "stopped_by"
STOP_REASON_TAG = "stop_reason"  # why a finished run ended where it did: STOP_PATIENCE, STOP_UNTIL or STOP_EPOCHS
#: On a run with ``--compile``: how many times TorchDynamo gave up compiling and ran eagerly
#: while it trained (``training.compiling.fallbacks``); ``"0"`` when compilation held.
COMPILE_FALLBACKS_TAG = "initmem.compile_fallbacks"
#: On every run initmem creates, beside MLflow's source tags (``tracking.provenance``): the
#: version of initmem that wrote it.
INITMEM_VERSION_TAG = "initmem.version"

#: A sweep's runs: the sweep's name (on the parent and every child), the parent's role, a
#: child's group key (``initmem_core.groups.group_label``) and its short label in the sweep
#: (``groups.short_labels``: what the prepared view groups by).
SWEEP_TAG = "initmem.sweep"
ROLE_TAG = "initmem.role"
PARENT_ROLE = "parent"  # the value of ROLE_TAG on a sweep's parent run
GROUP_TAG = "initmem.group"
GROUP_LABEL_TAG = "initmem.group_label"
#: On a sweep cell's run: how many times a remote worker started it, and the host:pid of the
#: worker running (or that last ran) it.
ATTEMPTS_TAG = "initmem.attempts"
WORKER_TAG = "initmem.worker"
#: A cell trained in a lockstep sweep: how many models its fused job trained (its only difference).
LOCKSTEP_TAG = "initmem.lockstep"
#: On a sweep's parent run: its cells, those that failed, those whose writes wait for
#: ``initmem sync``, and the fields that vary.
CELLS_TAG = "initmem.cells"
CELLS_FAILED_TAG = "initmem.cells_failed"
CELLS_UNSYNCED_TAG = "initmem.cells_unsynced"
VARYING_TAG = "initmem.varying"
#: On a sweep's parent run: the grids it holds, each as a digest of its cells' config hashes
#: (``sweep.identity``), comma-separated; a relaunch with another grid is refused unless ``--extend``.
GRID_TAG = "initmem.grid"
#: On a sweep's parent run: the section of its charts (``report-<n>/``) whose metrics are the latest
#: report's memory curves, and a digest of those curves (``SweepRuns.log_figures``).
CURVES_TAG = "initmem.curves"
CURVES_DIGEST_TAG = "initmem.curves_digest"
CURVES_SECTION_PREFIX = "report-"
#: On a sweep's parent run, one tag per registered claim (``report/claims.py``): ``initmem.verdict.<claim
#: name>`` = its verdict, so the MLflow UI can filter sweeps by what they decided.
VERDICT_TAG_PREFIX = "initmem.verdict."


def verdict_tag(claim: str) -> str:
    """The parent run's tag key holding claim ``claim``'s verdict."""
    return VERDICT_TAG_PREFIX + claim


#: Every run status, and every tag key, this module spells (a ``*_TAG`` or ``*_TAG_PREFIX``
#: defined above is one by its name, so none is left out of the architecture test's check).
STATUSES = (*ENDED, RUNNING, SCHEDULED, PENDING)
TAG_KEYS = tuple(value for name, value in dict(globals()).items() if name.endswith(("_TAG", "_TAG_PREFIX")))
