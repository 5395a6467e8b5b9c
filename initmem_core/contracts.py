"""What a run's kinds of plugin component receive and return: the contracts of their factories
(a report's kinds have theirs beside the types they name: ``report.claims.ClaimEvaluator``,
``report.figures.FigureFactory``, ``sweep.executor.ExecutorFactory``).

A hook registers a factory (``hookspecs``); a run calls it with the keyword arguments written
here, passing only those the factory's signature accepts (a factory may take a subset, as hook
implementations may). Also here: the records that cross the boundary, ``DatasetBundle``
(what a dataset returns), ``EvalState`` (what a metric sees) and ``SelectedPredictor`` (what a
metric is told of the selected checkpoint), and, re-exported from ``initmem_core.kinds``, what
each kind declares beside its factory. Importing this module imports no torch: the types are for
readers, type checkers and the generated hook reference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from initmem_core import kinds

# What each kind declares beside its factory, declared with the kinds: imported from here too.
from initmem_core.kinds import ArchitectureInfo, ClaimInfo, DatasetInfo, ExecutorInfo, FigureInfo, OptimizerInfo  # noqa: F401

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
    ``--opt-arg`` values, typed). It may record which parameters went where (``record_param_groups``).
    Its first param group must step as the optimizer's declared clock convention says
    (``testing.check_optimizer`` checks it): the clocks count the declaration. A family whose
    variants differ declares per variant."""

    def __call__(
        self, *, model: torch.nn.Module, config: RunConfig, options: dict[str, Any], variant: str | None = None
    ) -> torch.optim.Optimizer: ...


def record_param_groups(optimizer: torch.optim.Optimizer, groups: dict[str, list[str]]) -> None:
    """Add ``groups`` (group name -> parameter names) to what ``optimizer.initmem_param_groups``, an
    attribute torch's optimizers do not declare, records of which parameters went where (a run logs it)."""
    attributes = vars(optimizer)
    attributes["initmem_param_groups"] = {**attributes.get("initmem_param_groups", {}), **groups}


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


@runtime_checkable
class TakesSelected(Protocol):
    """A metric told of the run's selected predictor: ``take_selected`` is called once, after
    training and before ``summarize`` (optional)."""

    def take_selected(self, predictor: SelectedPredictor) -> None: ...


#: A metric implements ``compute``, ``summarize`` or both; ``take_selected`` and the other optional
#: methods ``hookspecs.initmem_register_metrics`` lists are looked for on it.
Metric = EpochMetric | SummaryMetric


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


class CommandFunction(Protocol):
    """An ``initmem`` subcommand: Typer makes the command of its signature (``typer.Argument`` and
    ``typer.Option`` annotations; a ``typer.Context`` parameter if it needs one) and its docstring."""

    def __call__(self, *args: Any, **kwargs: Any) -> None: ...


def __getattr__(name: str) -> Any:
    """A report kind's contract (``report.claims.ClaimEvaluator``...), which sits beside the types it
    names: still importable from here, where plugins written for API 1.x found it."""
    for kind in kinds.PLUGIN_KINDS:
        if kind.contract.endswith(":" + name):
            return kinds.resolve(kind.contract)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
