"""The training loop: one config in, a per-epoch history and a summary out.

Kept lean on purpose: loss and accuracy accumulate on the device and the host reads them once
per epoch (the logging point); the forgetting clocks tick on host floats; metric plugins run
only at evaluation points, so nothing a plugin does costs time inside the step.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch
import torch.nn.functional as F

from .clocks import ForgettingClocks
from .config import RunConfig
from .data import DatasetBundle
from .errors import ConfigError
from .loaders import make_loaders
from .metric_state import EvalState
from .registry import Registry
from .schedules import build_scheduler


class Progress(Protocol):
    """Receives progress; the CLI draws it with rich. Every method is optional to implement."""

    def start(self, epochs: int, steps_per_epoch: int) -> None: ...
    def advance(self, steps: int) -> None: ...
    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None: ...


class NoProgress:
    def start(self, epochs, steps_per_epoch): pass
    def advance(self, steps): pass
    def epoch_done(self, epoch, metrics): pass


class Diverged(RuntimeError):
    """The loss or the weights became non-finite."""

    def __init__(self, epoch: int, what: str):
        self.epoch = epoch
        super().__init__(f"diverged in epoch {epoch}: {what} is not finite")


def seed_for(seed: int, stream: str) -> int:
    """Independent, reproducible seeds for separate random streams of one run."""
    digest = hashlib.sha256(f"{stream}:{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"--device: unknown device '{name}'; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA GPU is available here; use --device cpu or auto")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("--device mps: MPS is not available here; use --device cpu or auto")
    return device


@dataclass
class TrainingSetup:
    """Everything a run is made of, built from the config before any tracking starts."""

    config: RunConfig
    device: torch.device
    dataset: DatasetBundle
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    regularizer: Any
    metrics: dict[str, Any]
    train_loader: Any
    eval_loaders: dict[str, Any]
    initial_params: dict[str, torch.Tensor]
    components: dict[str, Any] = field(default_factory=dict)

    def forward_pass(self) -> tuple[Callable[..., torch.Tensor], Callable[[], Any]]:
        """The model call and the autocast context the training step uses (see --compile, --amp)."""
        forward = torch.compile(self.model) if self.config.compile else self.model
        if self.config.amp == "bf16":
            return forward, lambda: torch.autocast(self.device.type, dtype=torch.bfloat16)
        return forward, contextlib.nullcontext

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def build_setup(config: RunConfig, registry: Registry) -> TrainingSetup:
    """Build data, model, initialization, optimizer, schedule, regularizer and metrics."""
    from initmem_plugins.metrics import DEFAULT_METRICS

    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    dataset = registry.build("dataset", config.data, config=config)
    n_train = len(dataset.train_y)
    if config.batch_size > n_train:
        raise ConfigError(
            f"--batch-size {config.batch_size} is larger than the training set of {config.data} "
            f"({n_train} examples); use at most {n_train}"
        )

    # The architecture's own init draws from the global RNG: seed it so that draw is the
    # paired Z of this seed (scaled-default relies on it), whatever sigma is.
    torch.manual_seed(config.seed)
    model = registry.build("architecture", config.arch, in_channels=dataset.in_channels,
                           num_classes=dataset.num_classes, image_size=dataset.image_size)
    init_generator = torch.Generator().manual_seed(seed_for(config.seed, "init"))
    registry.build("initializer", config.init, model=model, sigma=config.sigma, generator=init_generator)
    model.to(device, memory_format=torch.channels_last if config.channels_last else torch.contiguous_format)
    initial_params = {name: p.detach().clone() for name, p in model.named_parameters()}

    optimizer = registry.build("optimizer", config.opt, model=model, config=config)
    train_loader, eval_loaders = make_loaders(
        dataset, config, device, torch.Generator().manual_seed(seed_for(config.seed, "data-order")))
    scheduler = build_scheduler(optimizer, config, len(train_loader))
    regularizer = (registry.build("regularizer", config.reg, coefficient=config.l2) if config.l2 > 0 else None)
    metric_names = list(dict.fromkeys([*DEFAULT_METRICS, *config.metrics]))
    metrics = {name: registry.build("metric", name) for name in metric_names}
    components = {kind: registry.lookup(kind, getattr(config, key))[0] for kind, key in
                  (("architecture", "arch"), ("optimizer", "opt"), ("initializer", "init"),
                   ("dataset", "data"), ("regularizer", "reg"))}
    return TrainingSetup(config, device, dataset, model, optimizer, scheduler, regularizer, metrics,
                         train_loader, eval_loaders, initial_params, components)


@torch.no_grad()
def evaluate(setup: TrainingSetup, split: str) -> tuple[float, float]:
    """Mean loss and accuracy on a split, in eval mode, with large batches."""
    model = setup.model
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), device=setup.device)
    correct = torch.zeros((), device=setup.device, dtype=torch.long)
    loader = setup.eval_loaders[split]
    for xb, yb in loader:
        logits = model(xb)
        loss_sum += F.cross_entropy(logits, yb, reduction="sum")
        correct += (logits.argmax(1) == yb).sum()
    model.train(was_training)
    n = loader.num_examples
    return loss_sum.item() / n, correct.item() / n


def train(setup: TrainingSetup, log_metrics: Callable[[dict[str, float], int], None],
          progress: Progress | None = None) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Train for ``config.epochs`` epochs. ``log_metrics(metrics, step)`` gets every epoch's
    figures, starting with the initialization at step 0. Returns (history, summary)."""
    config, model, optimizer = setup.config, setup.model, setup.optimizer
    progress = progress or NoProgress()
    clocks = ForgettingClocks()
    trainable = [p for p in model.parameters() if p.requires_grad]
    initial = [setup.initial_params[name] for name, p in model.named_parameters() if p.requires_grad]
    history: list[dict[str, float]] = []
    l2 = config.l2 if setup.regularizer is not None else 0.0
    forward, autocast = setup.forward_pass()
    memory_format = torch.channels_last if config.channels_last else torch.contiguous_format

    def record(epoch: int, train_loss: float, train_acc: float, lr: float) -> None:
        row = {"train_loss": train_loss, "train_acc": train_acc}
        for split in ("val", "test"):
            row[f"{split}_loss"], row[f"{split}_acc"] = evaluate(setup, split)
        state = EvalState(model, setup.initial_params, epoch, history, config, setup.dataset, setup.device,
                          evaluate=lambda split: evaluate(setup, split))
        for metric in setup.metrics.values():
            row.update(metric.compute(state))
        row.update(clocks.as_metrics())
        row["lr"] = lr
        if setup.regularizer is not None:
            with torch.no_grad():
                row["reg_penalty"] = float(setup.regularizer.penalty(trainable, initial))
        log_metrics(row, epoch)
        history.append({"epoch": epoch, **row})
        progress.epoch_done(epoch, row)

    progress.start(config.epochs, len(setup.train_loader))
    record(0, *evaluate(setup, "train"), optimizer.param_groups[0]["lr"])
    model.train()
    for epoch in range(1, config.epochs + 1):
        loss_sum = torch.zeros((), device=setup.device)
        correct = torch.zeros((), device=setup.device, dtype=torch.long)
        seen = 0
        for x, y in setup.train_loader:
            lr = optimizer.param_groups[0]["lr"]  # the rate this step applies
            clocks.tick(lr, len(y), l2)
            with autocast():
                logits = forward(x.contiguous(memory_format=memory_format))
                loss = F.cross_entropy(logits.float(), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if setup.regularizer is not None:
                setup.regularizer.add_gradient(trainable, initial)
            optimizer.step()
            setup.scheduler.step()
            loss_sum += loss.detach() * len(y)
            correct += (logits.argmax(1) == y).sum()
            seen += len(y)
            progress.advance(1)
        train_loss = loss_sum.item() / seen  # the epoch's one host sync for training figures
        if not torch.isfinite(torch.tensor(train_loss)):
            raise Diverged(epoch, "the training loss")
        record(epoch, train_loss, correct.item() / seen, lr)

    summary: dict[str, float] = {}
    for metric in setup.metrics.values():
        if hasattr(metric, "summarize"):
            summary.update(metric.summarize(history))
    return history, summary
