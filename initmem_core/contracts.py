"""What each kind of plugin component receives and returns: the contracts of the factories.

A hook registers a factory (``hookspecs``); a run calls it with the keyword arguments written
here, passing only those the factory's signature accepts (a factory may take a subset, as hook
implementations may). Also here: the records that cross the boundary, ``DatasetBundle``
(what a dataset returns), ``EvalState`` (what a metric sees) and ``SelectedPredictor`` (what a
metric is told of the selected checkpoint). Importing this module imports
no torch: the types are for readers, type checkers and the generated hook reference.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from initmem_core.config import RunConfig


# -- records -----------------------------------------------------------------------------------


@dataclass
class DatasetBundle:
    """Train/val/test splits held as tensors.

    Images are ``N x C x H x W``, either ``uint8`` in 0..255 (CIFAR: 4x less memory on the
    device; ``pixel_scale=255``) or ``float32`` already in 0..1 (``pixel_scale=1``). Labels are
    ``int64``. ``mean``/``std`` (per channel, in 0..1 units) normalise a batch after
    augmentation. ``augment_default`` says whether crop+flip augmentation is on by default.
    ``reads_files``: ``False`` for data that is generated or ships inside a package, so that a
    ``--data-dir`` given for it is refused rather than silently ignored (``None``: not said).
    """

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment_default: bool = False
    pixel_scale: float = 1.0
    reads_files: bool | None = None

    @property
    def in_channels(self) -> int:
        return int(self.train_x.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.train_x.shape[-1])

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train_y), "val": len(self.val_y), "test": len(self.test_y)}


@dataclass
class EvalState:
    """Passed to ``metric.compute(state)`` at epoch 0 (the initialization) and after each epoch.

    ``initial_params`` maps every parameter name to its value at initialization (W0), on the
    training device. ``history`` holds the metric dicts already logged, one per epoch.
    ``evaluate(split)`` returns ``(loss, accuracy)`` of the current model on ``"train"``,
    ``"val"`` or ``"test"`` (an extra pass: use sparingly). ``figures``: this point's
    ``train_*``/``val_*``/``test_*`` figures already measured; ``test_correct``: which test
    examples the model got right (a bool tensor on the device). ``"test"`` is the test split
    scored every epoch, a subset when ``--eval-size`` caps it (``SelectedPredictor`` has the
    selected checkpoint on the whole split).
    """

    model: torch.nn.Module
    initial_params: dict[str, torch.Tensor]
    epoch: int
    history: list[dict[str, float]]
    config: RunConfig
    dataset: DatasetBundle
    device: torch.device
    evaluate: Callable[[str], tuple[float, float]]
    figures: dict[str, float] = field(default_factory=dict)
    test_correct: Any = None


@dataclass(frozen=True)
class SelectedPredictor:
    """The run's selected predictor (the best-validation checkpoint, ``training/selection.py``) as
    scored on the test split: handed once, after training and before ``summarize``, to every
    metric that has ``take_selected(predictor)``.

    ``test_correct`` (a bool tensor, one per test example, in the split's order), ``test_acc`` and
    ``test_loss`` are over ``test_examples`` examples: the whole test split, also when
    ``--eval-size`` capped what was scored at every epoch. Then ``capped_test_acc`` is the figure
    on the capped subset (the history's ``test_acc`` at ``epoch``); otherwise it is ``None`` and
    the figures are the history's own.
    """

    epoch: int
    test_loss: float
    test_acc: float
    test_correct: Any
    test_examples: int
    capped_test_acc: float | None = None


# -- what each kind's factory is called with, and returns ------------------------------------


class ArchitectureFactory(Protocol):
    """Returns an untrained model mapping ``(N, in_channels, image_size, image_size)`` images to
    ``(N, num_classes)`` logits; the initializer later rescales its kernels by sigma."""

    def __call__(
        self, *, in_channels: int, num_classes: int, image_size: int, variant: str | None = None
    ) -> torch.nn.Module: ...


@runtime_checkable
class DeclaresScaleInvariance(Protocol):
    """A model that says which of its weights are scale-invariant (optional; see
    ``initmem_core.training.effective_step``): multiplying one of them by a positive constant leaves
    the network's function unchanged, because it feeds a normalisation layer. Without this method
    they are found by tracing the model (a conv or linear kernel whose output only a norm reads)."""

    def scale_invariant_parameters(self) -> list[str]:
        """Names (as in ``named_parameters()``) of the scale-invariant weights."""


class OptimizerFactory(Protocol):
    """Returns an optimizer over every trainable parameter, set from ``config`` (``lr``,
    ``momentum``, ``weight_decay``...) and ``options`` (its declared options with the run's
    ``--opt-arg`` values, typed). It may set ``optimizer.initmem_param_groups`` (group name ->
    parameter names) to record which parameters went where. Its first param group must step as
    the optimizer's declared clock convention says (``testing.check_optimizer`` checks it): the
    clocks count the declaration. A family whose variants differ declares per variant."""

    def __call__(
        self, *, model: torch.nn.Module, config: RunConfig, options: dict[str, Any], variant: str | None = None
    ) -> torch.optim.Optimizer: ...


class InitializerFactory(Protocol):
    """Re-initializes ``model`` in place, *paired*: a unit-scale ``Z`` drawn from ``generator``
    (seeded from the run seed, the same at every sigma), kernels set to ``sigma * Z``. Returns nothing."""

    def __call__(
        self, *, model: torch.nn.Module, sigma: float, generator: torch.Generator, variant: str | None = None
    ) -> None: ...


@runtime_checkable
class Regularizer(Protocol):
    """An explicit penalty on the weights, applied after every backward pass (adding its gradient
    is cheaper than a second autograd graph and exactly the same update). ``params`` and
    ``initial_params`` are matching lists of tensors."""

    def add_gradient(self, params: list[torch.Tensor], initial_params: list[torch.Tensor]) -> None:
        """Add the penalty's gradient to each ``param.grad`` in place."""

    def penalty(self, params: list[torch.Tensor], initial_params: list[torch.Tensor]) -> torch.Tensor:
        """The penalty's value (a scalar tensor), for logging."""


class RegularizerFactory(Protocol):
    def __call__(self, *, coefficient: float, variant: str | None = None) -> Regularizer: ...


@runtime_checkable
class EpochMetric(Protocol):
    """A metric computed at every evaluation point; returned names become MLflow metrics."""

    def compute(self, state: EvalState) -> dict[str, float]: ...


@runtime_checkable
class SummaryMetric(Protocol):
    """A metric read off the whole history once, at the end of the run."""

    def summarize(self, history: list[dict[str, float]]) -> dict[str, float]: ...


#: A metric implements ``compute``, ``summarize`` or both, and the optional methods that
#: ``hookspecs.initmem_register_metrics`` lists.
Metric = Any


class MetricFactory(Protocol):
    """Returns a metric (``EpochMetric``, ``SummaryMetric`` or both) for one run of ``config``."""

    def __call__(self, *, config: RunConfig, variant: str | None = None) -> Metric: ...


class DatasetFactory(Protocol):
    """Returns the whole dataset as a ``DatasetBundle``; splits are a pure function of
    ``config.data_seed``, and ``config.train_size > 0`` keeps the first N training examples."""

    def __call__(self, *, config: RunConfig, variant: str | None = None) -> DatasetBundle: ...


class Register(Protocol):
    """What every hook receives; its arguments are described in ``hookspecs`` (an unknown
    ``declared`` keyword is a plugin that fails to load)."""

    def __call__(
        self,
        name: str,
        factory: Callable[..., Any] | str,
        description: str = "",
        *,
        default: bool = False,
        **declared: Any,
    ) -> None: ...


@dataclass(frozen=True)
class OptimizerInfo:
    """What an optimizer declares beside its factory (``register(name, factory, description,
    defaults=..., clock=...)``), in the manner of timm's ``OptimInfo``.

    ``defaults``: ``lr`` (what ``--lr`` left unset means; 0.05 when not declared) and every option
    ``--opt-arg key=value`` may set, with its default value, which gives the type a command-line
    value is read as (an unknown key is refused with the valid ones). ``clock``: how a step maps
    to the forgetting clocks: ``"heavy-ball"`` (the default), effective step
    ``lr * (1 - dampening) / (1 - momentum)``, for momentum that sums gradients (torch SGD);
    ``"lr"``, the step is ``lr``, for momentum that averages them (Adam, Lion, Muon) or none. The
    clocks count the declaration (``testing.check_optimizer`` checks the built optimizer agrees);
    the run logs it as ``clock_convention``. A family (``timm:*``) may give either as an import
    string of ``f(variant)``, resolved only when a run uses it. ``elementwise``: its update and
    state are per element, so one optimizer over K models' stacked parameters is K optimizers (a
    lockstep sweep fuses only such; undeclared: not fused)."""

    defaults: Mapping[str, Any] | str | None = None
    clock: str = ""
    elementwise: bool = False

    def declared_defaults(self, variant: str | None = None) -> dict[str, Any]:
        """The declared defaults (an import string is resolved here, not before)."""
        if self.defaults is None:
            return {}
        if isinstance(self.defaults, str):
            return dict(_resolve(self.defaults)(variant))
        return dict(self.defaults)

    def declared_clock(self, variant: str | None = None) -> str:
        """The declared clock convention ("" when none), an import string resolved here."""
        return str(_resolve(self.clock)(variant)) if ":" in self.clock else self.clock


@dataclass(frozen=True)
class ArchitectureInfo:
    """What an architecture declares beside its factory: ``fused``, the import string of
    ``f(models) -> module``, K of its built models as one module whose ``forward`` returns K x N x
    classes and whose ``split(tensors)`` gives its named tensors back as K state dicts of views in
    one model's names (what a lockstep sweep trains; undeclared: never fused)."""

    fused: str = ""


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset declares beside its factory (``register(name, factory, description, shape=...,
    classes=..., splits=...)``), so that a run is planned and ``initmem sweep --dry-run`` sized
    without its files: ``shape``, (C, H, W) of an image; ``classes``; ``splits``, the (train,
    validation, test) examples of the whole dataset, as the factory builds them (``--train-size``
    cuts the first). ``--until`` finds a run's epochs from the training split when it is planned;
    left undeclared, the planning builds the dataset to count it (so a run reads its data twice),
    and the dry run to read them all. ``files``: (file name, md5) pairs that recognise the
    dataset's files (a name may repeat; a ``.gz`` file matches its own or its content's md5): a
    ``--data-dir`` holding files another dataset declares, and none of these, is refused."""

    shape: tuple[int, int, int] | None = None
    classes: int | None = None
    splits: tuple[int, int, int] | None = None
    files: tuple[tuple[str, str], ...] = ()


def _resolve(target: str) -> Callable[..., Any]:
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


class ClaimEvaluator(Protocol):
    """A claim: from the sweep view (``initmem_core.report.claim_groups.Sweep``: the report, its
    groups with their optimizer family and clocks, its strata along an axis) to its ``Finding``
    (``initmem_core.report.verdicts``), built with the core's helpers (``initmem_core.report.claims``:
    ``per_stratum``, ``difference``, the verdict rule and the regime checks)."""

    def __call__(self, sweep: Any) -> Any: ...  # Sweep -> Finding (the report's layer, above this module)


@dataclass(frozen=True)
class ClaimInfo:
    """What a claim declares beside its evaluator (``register(name, evaluate, statement, **info)``),
    shown by ``initmem plugins`` and read by the core: ``axis``, the settings it compares (its
    strata hold everything else equal); ``quantities``, what it decides on, in words; ``margin``,
    the margin fixed before any run, in words; ``clock`` and ``threshold``, the clock its mechanism
    needs (``clock_sgd``, ``clock_l2``, ``clock_adapt``) and the value it must reach before the
    claim can be contradicted (empty clock: none, a claim that memory is kept; no threshold:
    ``report.regime.CLOCK_THRESHOLDS``); ``source``, the paper or note it tests."""

    axis: tuple[str, ...] = ()
    quantities: str = ""
    margin: str = ""
    clock: str = ""
    threshold: float | None = None
    source: str = ""


class FigureFactory(Protocol):
    """A report figure: draws one figure of ``report`` (``initmem_core.report.memory.Report``, its
    claims' ``findings`` on it) and writes it to ``path`` (the report's folder joined with the
    figure's declared ``FigureInfo.file``); returns the path written, or ``None`` when the report
    lacks what the figure needs (no claim evaluated, no per-epoch histories). ``records``: the
    cells the report was built from (``initmem_core.tracking.records.CellRecord``: config, every
    metric logged, histories), for what the report does not aggregate. A figure that raises is
    left out with a one-line warning; the report's other files and figures are still written."""

    # Report and CellRecord: the report's and tracking's layers, above this module
    def __call__(self, *, report: Any, path: Path, records: Sequence[Any]) -> Path | None: ...


@dataclass(frozen=True)
class FigureInfo:
    """What a figure declares beside its factory (``register(name, draw, description, file=...,
    warm_up=...)``): ``file``, its file name in the report's folder and under the parent run's
    ``report/`` (default ``<name>.png``), which the parent run's description links without drawing
    it; ``warm_up``, an import string of a function without arguments that loads what drawing needs
    (its library, fonts), which a sweep calls once while its cells train so that the report at the
    end does not wait for it (the built-in figures share ``initmem_plugins.figures.canvas:warm_up``)."""

    file: str = ""
    warm_up: str = ""

    def __post_init__(self) -> None:
        if self.file and (Path(self.file).name != self.file or self.file.startswith(".")):
            raise ValueError(f"file must be a plain file name, not {self.file!r}")

    def file_for(self, name: str) -> str:
        """The file a figure registered as ``name`` is written to."""
        return self.file or f"{name}.png"


class ExecutorFactory(Protocol):
    """Returns an executor (``initmem_core.sweep.executor.Executor``: ``run(cells, sweep)``, each cell
    submitted and closed through ``sweep``, run with ``run_cell``; ``start``, ``stop`` and ``pin``
    optional), built from the executor options the sweep was given (``--workers``, ``--ray-address``...:
    those its ``ExecutorInfo.options`` declares) and ``folder``, its own folder in the sweep's output
    (``<out>/<name>``) for files its workers share. A bad option is a ``ConfigError`` (one line)."""

    def __call__(self, *, folder: Path, **options: Any) -> Any: ...  # -> Executor (the sweep's layer, above)


@dataclass(frozen=True)
class ExecutorInfo:
    """What an executor declares beside its factory (``register(name, factory, description, needs=...,
    install=..., options=...)``), read before it is built: ``needs``, the optional packages it imports
    (import names), of which a missing one is refused in one line with ``install``, the command that
    installs them; ``options``, the executor options its factory takes, by keyword (``workers``,
    ``address``, ``cpus_per_cell``...: ``initmem sweep``'s executor flags), another given to it
    refused before anything runs."""

    needs: tuple[str, ...] = ()
    install: str = ""
    options: tuple[str, ...] = ()


class CommandFunction(Protocol):
    """An ``initmem`` subcommand: Typer makes the command of its signature (``typer.Argument`` and
    ``typer.Option`` annotations; a ``typer.Context`` parameter if it needs one) and its docstring."""

    def __call__(self, *args: Any, **kwargs: Any) -> None: ...


#: Every contract by name, as ``initmem_core.kinds`` refers to them, for the hook reference.
FACTORIES = {
    cls.__name__: cls
    for cls in (
        ArchitectureFactory,
        OptimizerFactory,
        InitializerFactory,
        RegularizerFactory,
        MetricFactory,
        DatasetFactory,
        ClaimEvaluator,
        FigureFactory,
        ExecutorFactory,
        CommandFunction,
    )
}
