"""Contract checks and a smoke run for plugin components (import them from ``initmem_core.testing``).

Each ``check_<kind>(name)`` builds the component through the registry (the process-wide one,
which the ``initmem_registry`` fixture sets, unless given ``registry=``), as a run does, and raises
an ``AssertionError`` saying which part of its contract (docs/plugins.md) is broken."""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
from torch import nn

from initmem_core.config import RunConfig
from initmem_core.contracts import DatasetBundle, EvalState, SelectedPredictor, TakesSelected
from initmem_core.errors import ConfigError
from initmem_core.kernels import kernel_parameters
from initmem_core.kinds import kind_named
from initmem_core.plugin_system.loader import get_registry
from initmem_core.plugin_system.registry import ComponentSpec, Registry
from initmem_core.training.clocks import effective_step
from initmem_core.training.plan import plan_run
from initmem_core.vocabulary import FINISHED

#: A small, fast run on the CPU; the data defaults to 8x8 grey synthetic images of 4 classes.
SMOKE_DEFAULTS = {"arch": "resnet20", "epochs": 1, "batch_size": 16, "lr": 0.01, "device": "cpu"}


def _registry(registry: Registry | None) -> Registry:
    return registry if registry is not None else get_registry()


def smoke_train(kind: str, name: str, steps: int = 3, *, registry: Registry | None = None, **config: Any):
    """Train ``steps`` optimizer steps with the ``kind`` component ``name`` through the real loop
    (``initmem_core.run``, tracking off) and return the ``RunResult``. All else is small: ResNet-20
    on synthetic 8x8 images, one epoch, on the CPU (a regularizer at ``l2=1e-3``); ``config``
    overrides any ``RunConfig`` field."""
    from initmem_core.training.runner import run  # lazy: the contract checks alone never load the tracking stack

    try:
        component = kind_named(kind)
    except ConfigError as error:  # a test's own mistake, not a user's
        raise ValueError(str(error)) from None
    values = {**SMOKE_DEFAULTS, **config}
    examples = steps * values["batch_size"]
    values.setdefault("data", f"synthetic:1x8x8-c4-n{examples}")
    values.setdefault("train_size", examples)  # a dataset under test is cut to `steps` batches too
    if kind == "regularizer":
        values.setdefault("l2", 1e-3)
    values[component.field] = (name,) if component.many else name
    result = run(values, tracking=False, registry=registry)
    assert result.status == FINISHED, f"the smoke run with {kind} '{name}' ended {result.status}"
    return result


def _toy_model(in_channels: int = 1, image_size: int = 8, num_classes: int = 4) -> nn.Module:
    """A conv kernel, a linear kernel and their biases: every kind of parameter a check needs."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 4, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * image_size * image_size, num_classes),
    )


def check_architecture(
    name: str, shapes: tuple[tuple[int, int, int], ...] = ((1, 8, 4), (3, 16, 10)), *, registry: Registry | None = None
) -> None:
    """For each ``(in_channels, image_size, num_classes)`` in ``shapes``: the factory returns a
    ``torch.nn.Module`` with trainable parameters and Conv/Linear kernels (what sigma scales),
    mapping ``(2, in_channels, image_size, image_size)`` images to finite ``(2, num_classes)`` logits."""
    registry = _registry(registry)
    for in_channels, image_size, num_classes in shapes:
        where = f"architecture '{name}' for {in_channels}x{image_size}x{image_size} images and {num_classes} classes"
        model = registry.build(
            "architecture", name, in_channels=in_channels, num_classes=num_classes, image_size=image_size
        )
        assert isinstance(model, nn.Module), (
            f"{where}: the factory returned {type(model).__name__}, not a torch.nn.Module"
        )
        assert any(p.requires_grad for p in model.parameters()), f"{where}: no trainable parameters"
        assert kernel_parameters(model), f"{where}: no Conv/Linear kernels, so --sigma would change nothing"
        images = torch.rand(2, in_channels, image_size, image_size, generator=torch.Generator().manual_seed(0))
        try:
            logits = model(images)
        except RuntimeError as error:
            raise AssertionError(f"{where}: the forward pass failed: {error}") from error
        assert tuple(logits.shape) == (2, num_classes), (
            f"{where}: logits have shape {tuple(logits.shape)}, expected (2, {num_classes})"
        )
        assert torch.isfinite(logits).all(), f"{where}: logits are not finite"


def check_optimizer(name: str, *, registry: Registry | None = None, **config: Any) -> None:
    """Given what a run gives it (the planned config and typed options), the factory returns a
    ``torch.optim.Optimizer`` holding every trainable parameter; one step changes every one and
    leaves them finite; and its first param group steps as its declared clock convention says.
    ``config`` overrides ``RunConfig`` fields (``lr`` defaults to 0.01)."""
    torch.manual_seed(0)
    model = _toy_model()
    plan = plan_run(RunConfig(opt=name, **{"lr": 0.01, **config}), _registry(registry))
    optimizer = plan.optimizer.build(model=model, config=plan.config, options=dict(plan.options))
    where = f"optimizer '{name}'"
    assert isinstance(optimizer, torch.optim.Optimizer), (
        f"{where}: the factory returned {type(optimizer).__name__}, not a torch.optim.Optimizer"
    )
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    missing = [n for n, p in model.named_parameters() if id(p) not in held]
    assert not missing, f"{where} was not given these trainable parameters: {', '.join(missing)}"

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    images = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    nn.functional.cross_entropy(model(images), torch.arange(8) % 4).backward()
    optimizer.step()
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p.detach(), before[n])]
    assert not unchanged, f"one step of {where} left these parameters unchanged: {', '.join(unchanged)}"
    broken = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    assert not broken, f"one step of {where} made these parameters non-finite: {', '.join(broken)}"
    # With momentum the conventions differ, so that is where a wrong declaration shows (an
    # optimizer that refuses momentum is checked at the momentum it was given).
    if "momentum" not in config:
        try:
            with_momentum = plan_run(plan.config.replace(momentum=0.9), _registry(registry))
            built_with = with_momentum.optimizer.build(
                model=_toy_model(), config=with_momentum.config, options=dict(with_momentum.options)
            )
            plan, optimizer = with_momentum, built_with
        except ConfigError:
            pass
    built, declared = effective_step(optimizer.param_groups[0], plan.clock), plan.rule.eta(1.0)
    assert math.isclose(built, declared, rel_tol=1e-9), (
        f"{where} as built steps by an effective {built:g} ({plan.clock} convention), not the {declared:g} "
        f"its declared settings give (lr {plan.rule.lr:g}, momentum {plan.rule.momentum:g}): register it "
        "with the clock convention it follows (clock='lr' for averaged or no momentum) and build it from "
        "config.lr and config.momentum"
    )


def check_initializer(name: str, sigmas: tuple[float, float] = (1.0, 2.0), *, registry: Registry | None = None) -> None:
    """Paired init: with the same ``generator`` seed the kernels at ``sigmas[1]`` are exactly
    ``sigmas[1] / sigmas[0]`` times those at ``sigmas[0]``, whatever state torch's global RNG is
    in (Z comes from ``generator``), and they are finite and not all zero."""
    registry = _registry(registry)

    def kernels_at(sigma: float, global_seed: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)  # the architecture's own init, fixed as a run fixes it by --seed
        model = _toy_model()
        torch.manual_seed(global_seed)  # differs between the two calls: must not change the draw
        registry.build("initializer", name, model=model, sigma=sigma, generator=torch.Generator().manual_seed(0))
        return {n: w.detach().clone() for n, w in kernel_parameters(model)}

    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG as it was
        low, high = kernels_at(sigmas[0], 1), kernels_at(sigmas[1], 2)
    ratio = sigmas[1] / sigmas[0]
    for layer, kernel in low.items():
        assert torch.isfinite(kernel).all() and kernel.abs().sum() > 0, (
            f"initializer '{name}': kernel {layer} is zero or not finite at sigma={sigmas[0]:g}"
        )
        assert torch.allclose(high[layer], ratio * kernel, rtol=1e-5, atol=1e-8), (
            f"initializer '{name}' is not paired: kernel {layer} at sigma={sigmas[1]:g} is not {ratio:g} x "
            f"its value at sigma={sigmas[0]:g}; draw Z from the `generator` argument and set the kernel to sigma * Z"
        )


def check_regularizer(name: str, coefficient: float = 0.1, *, registry: Registry | None = None) -> None:
    """``penalty(params, initial_params)`` is a finite scalar tensor differentiable in ``params``,
    and ``add_gradient(params, initial_params)`` adds exactly its gradient to each ``param.grad``."""
    regularizer = _registry(registry).build("regularizer", name, coefficient=coefficient)
    where = f"regularizer '{name}'"
    generator = torch.Generator().manual_seed(0)
    params = [torch.randn(shape, generator=generator).requires_grad_() for shape in ((4, 3), (5,))]
    initial = [torch.randn(p.shape, generator=generator) for p in params]

    penalty = regularizer.penalty(params, initial)
    assert torch.is_tensor(penalty) and penalty.ndim == 0 and penalty.requires_grad, (
        f"{where}: penalty() must return a scalar tensor computed from params with torch ops, got {penalty!r}"
    )
    assert torch.isfinite(penalty), f"{where}: penalty() is not finite"
    expected = torch.autograd.grad(penalty, params)

    existing = [torch.randn(p.shape, generator=generator) for p in params]
    for param, grad in zip(params, existing):
        param.grad = grad.clone()
    regularizer.add_gradient(params, initial)
    for i, (param, grad, want) in enumerate(zip(params, existing, expected)):
        assert param.grad is not None, f"{where}: add_gradient() left params[{i}].grad None"
        assert torch.allclose(param.grad - grad, want, rtol=1e-5, atol=1e-6), (
            f"{where}: add_gradient() did not add the gradient of penalty() to params[{i}].grad "
            "(it must add in place to the existing .grad)"
        )


class _RecordingMetric:
    """Passes every call through to a metric and checks what comes back as it happens (a method the
    metric lacks gives nothing, as the run would take from it)."""

    def __init__(self, metric: Any, name: str, returned: list[dict]):
        self.metric, self.name, self.returned = metric, name, returned

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.metric, attribute)  # state_dict(), artifacts()...

    def compute(self, state: EvalState) -> dict[str, float]:
        compute = getattr(self.metric, "compute", None)
        return self._checked(compute(state), f"compute() at epoch {state.epoch}") if compute else {}

    def summarize(self, history: list[dict[str, float]]) -> dict[str, float]:
        summarize = getattr(self.metric, "summarize", None)
        return self._checked(summarize(history), "summarize()") if summarize else {}

    def take_selected(self, predictor: SelectedPredictor) -> None:
        if isinstance(self.metric, TakesSelected):
            self.metric.take_selected(predictor)

    def _checked(self, values: Any, call: str) -> Any:
        where = f"metric '{self.name}': {call}"
        assert isinstance(values, dict), f"{where} returned {type(values).__name__}, not a dict"
        for key, value in values.items():
            assert isinstance(key, str), f"{where} returned the key {key!r}, not a string"
            assert isinstance(value, numbers.Real) and not isinstance(value, bool), (
                f"{where} returned {key}={value!r} ({type(value).__name__}); return plain numbers (float(...))"
            )
            assert math.isfinite(value), f"{where} returned {key}={value}, not a finite number"
        self.returned.append(values)
        return values


def check_metric(name: str, epochs: int = 2, *, registry: Registry | None = None, **config: Any) -> None:
    """In a short real run (``smoke_train``), ``compute(state)`` at epoch 0 and after every epoch,
    and ``summarize(history)`` if it exists, return dicts of names to finite numbers, with at
    least one number in all. ``config`` overrides ``RunConfig`` fields."""
    registry = _registry(registry)
    spec, variant = registry.lookup("metric", name)
    returned: list[dict] = []
    recording = ComponentSpec(
        "metric",
        name,
        lambda config: _RecordingMetric(spec.build(variant, config=config), name, returned),
        spec.description,
        spec.provider,
    )
    smoke_train("metric", name, steps=2, registry=registry.with_component(recording), epochs=epochs, **config)
    assert any(returned), f"metric '{name}' returned no numbers at any evaluation point"


def check_dataset(name: str, *, registry: Registry | None = None, **config: Any) -> None:
    """The factory returns a ``DatasetBundle`` whose splits hold ``(N, C, S, S)`` images of one shape
    (``uint8`` with ``pixel_scale=255`` or ``float32`` in 0..1 with ``pixel_scale=1``) and ``int64``
    labels in ``0..num_classes-1``, every class in the training split; ``mean`` and ``std`` per
    channel; ``--train-size k`` keeps the first k training examples and leaves the other splits
    alone; and the image shape and classes the plugin declares (``contracts.DatasetInfo``) are what
    it builds. ``config`` overrides ``RunConfig`` fields."""
    registry = _registry(registry)

    def build(**changes: Any) -> DatasetBundle:
        return registry.build("dataset", name, config=RunConfig(data=name, **{**config, **changes}))

    bundle, where = build(), f"dataset '{name}'"
    assert isinstance(bundle, DatasetBundle), (
        f"{where}: the factory returned {type(bundle).__name__}, not an initmem_core.contracts.DatasetBundle"
    )
    assert bundle.num_classes >= 2, f"{where}: num_classes is {bundle.num_classes}; a classifier needs 2 or more"
    image_shape = tuple(bundle.train_x.shape[1:])
    for split in ("train", "val", "test"):
        images, labels = getattr(bundle, f"{split}_x"), getattr(bundle, f"{split}_y")
        at = f"{where}, {split} split"
        assert images.ndim == 4 and images.shape[-1] == images.shape[-2], (
            f"{at}: images have shape {tuple(images.shape)}, expected N x C x S x S"
        )
        assert tuple(images.shape[1:]) == image_shape, (
            f"{at}: images are {tuple(images.shape[1:])}, the train split's are {image_shape}"
        )
        assert len(images) == len(labels) > 0, f"{at}: {len(images)} images but {len(labels)} labels"
        assert labels.dtype == torch.int64, f"{at}: labels are {labels.dtype}, expected torch.int64"
        assert 0 <= int(labels.min()) and int(labels.max()) < bundle.num_classes, (
            f"{at}: labels span {int(labels.min())}..{int(labels.max())}, outside 0..{bundle.num_classes - 1}"
        )
        _check_pixels(images, bundle.pixel_scale, at)
    classes = set(bundle.train_y.tolist())
    assert len(classes) == bundle.num_classes, (
        f"{where}: declares {bundle.num_classes} classes but the training split holds {len(classes)}"
    )
    channels = image_shape[0]
    assert len(bundle.mean) == len(bundle.std) == channels, (
        f"{where}: mean and std need one entry per channel ({channels}), got {len(bundle.mean)} and {len(bundle.std)}"
    )
    assert all(s > 0 for s in bundle.std), f"{where}: std must be positive, got {bundle.std}"
    # What it declares for a dry run (not its split sizes: a test's files may be a small stand-in).
    declared = registry.lookup("dataset", name)[0].info
    assert declared.shape in (None, image_shape), f"{where}: declares images {declared.shape} but builds {image_shape}"
    assert declared.classes in (None, bundle.num_classes), (
        f"{where}: declares {declared.classes} classes but builds {bundle.num_classes}"
    )
    keep = len(bundle.train_y) // 2  # at least 1: the split holds every one of 2 or more classes
    cut = build(train_size=keep)
    assert len(cut.train_y) == keep, (
        f"{where}: --train-size {keep} gave {len(cut.train_y)} training examples instead of {keep}"
    )
    assert torch.equal(cut.train_y, bundle.train_y[:keep]), (
        f"{where}: --train-size {keep} must keep the first {keep} training examples, not others"
    )
    assert cut.sizes()["val"] == bundle.sizes()["val"] and cut.sizes()["test"] == bundle.sizes()["test"], (
        f"{where}: --train-size must leave the validation and test splits alone"
    )


def _check_pixels(images: torch.Tensor, pixel_scale: float, at: str) -> None:
    if images.dtype == torch.uint8:
        assert pixel_scale == 255, f"{at}: uint8 images need pixel_scale=255, got {pixel_scale}"
    elif images.dtype == torch.float32:
        assert pixel_scale == 1, f"{at}: float32 images need pixel_scale=1, got {pixel_scale}"
        assert float(images.min()) >= 0 and float(images.max()) <= 1, f"{at}: float32 pixels must lie in 0..1"
    else:
        raise AssertionError(f"{at}: images are {images.dtype}, expected torch.uint8 or torch.float32")
