"""The training loop: one config in, a per-epoch history and a summary out.

Kept lean on purpose: loss and accuracy accumulate on the device and the host reads them once
per epoch (the logging point); the forgetting clocks tick on host floats; metric plugins run
only at evaluation points, so nothing a plugin does costs time inside the step.

Reproducible to the bit: every random stream is seeded from ``config.seed`` (``seed_for``), and
``snapshot``/``restore`` carry everything the loop depends on through a checkpoint, so a run
stopped at any step boundary and resumed computes exactly what it would have computed anyway.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

import torch
import torch.nn.functional as F

from .checkpoints import capture_rng, restore_rng
from .clocks import ForgettingClocks
from .config import RunConfig
from .data import DatasetBundle
from .divergence import Diverged, LossGuard, all_finite
from .errors import ConfigError, RunWarning
from .loaders import make_loaders
from .metric_state import EvalState
from .registry import Registry
from .schedules import build_scheduler
from .stop_signals import NoStop, Stopped

__all__ = ["Diverged", "Stopped", "TrainingSetup", "build_setup", "evaluate", "seed_for", "train"]


class Progress(Protocol):
    """Receives progress; the CLI draws it with rich. Every method is optional to implement."""

    def start(self, epochs: int, steps_per_epoch: int) -> None: ...
    def advance(self, steps: int) -> None: ...
    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None: ...


class NoProgress:
    def start(self, epochs, steps_per_epoch): pass
    def advance(self, steps): pass
    def epoch_done(self, epoch, metrics): pass


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


def use_determinism(deterministic: bool, device: torch.device) -> None:
    """``--deterministic``: kernels that give the same bits on every run, where a device has a
    choice (GPUs). The setting is process-wide, so it follows the config of each run built."""
    if deterministic and device.type == "cuda":
        # cuBLAS needs a fixed workspace to be deterministic; read when its handle is created.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if torch.are_deterministic_algorithms_enabled() != deterministic:  # the call costs seconds
        torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    if deterministic:
        torch.backends.cudnn.benchmark = False  # benchmarking picks kernels by timing, run to run


def build_setup(config: RunConfig, registry: Registry) -> TrainingSetup:
    """Build data, model, initialization, optimizer, schedule, regularizer and metrics."""
    from initmem_plugins.metrics import DEFAULT_METRICS

    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    use_determinism(config.deterministic, device)
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


def epoch_batches(loader: Any, start: int) -> Iterator[Any]:
    """One epoch's batches from batch ``start`` on; the epoch's randomness is drawn as from 0."""
    if hasattr(loader, "epoch"):
        return loader.epoch(start_batch=start)
    return itertools.islice(iter(loader), start, None)


@dataclass
class EpochSums:
    """Training figures of the epoch in progress, accumulated on the device."""

    loss: torch.Tensor
    correct: torch.Tensor
    seen: int = 0

    @classmethod
    def zero(cls, device: torch.device) -> "EpochSums":
        return cls(torch.zeros((), device=device), torch.zeros((), device=device, dtype=torch.long))


def _is_plain(value: Any) -> bool:
    """Data ``torch.load(weights_only=True)`` reads back."""
    if isinstance(value, dict):
        return all(isinstance(k, (str, int)) and _is_plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool, torch.Tensor))


def metric_states(metrics: dict[str, Any]) -> dict[str, Any]:
    """Each metric plugin's state: its ``state_dict()`` if it has one, else its attributes when
    they are plain data (e.g. the per-layer table ``weight-norms`` accumulates)."""
    states = {}
    for name, metric in metrics.items():
        state = metric.state_dict() if hasattr(metric, "state_dict") else dict(vars(metric))
        if _is_plain(state):
            states[name] = state
        else:
            warnings.warn(f"metric {name} keeps state that is not plain data, so a resumed run restarts it; "
                          "give it state_dict()/load_state_dict()", RunWarning, stacklevel=2)
    return states


def snapshot(setup: TrainingSetup, position: tuple[int, int], clocks: ForgettingClocks,
             history: list[dict[str, float]], sums: EpochSums, loader_state: dict[str, Any]) -> dict[str, Any]:
    """The training state at a step boundary: ``position`` = (epochs done, steps into the next);
    ``loader_state`` = the data-order generator as it was when that next epoch began."""
    return {
        "epoch": position[0], "step": position[1],
        "model": setup.model.state_dict(),  # BatchNorm buffers included
        "optimizer": setup.optimizer.state_dict(),
        "scheduler": setup.scheduler.state_dict(),
        "initial_params": setup.initial_params,  # W0, which the memory metrics compare against
        "clocks": dataclasses.asdict(clocks),
        "history": history,  # best-validation selection and tau_interp are read off it
        "epoch_sums": {"loss": sums.loss, "correct": sums.correct, "seen": sums.seen},
        "loader": loader_state,
        "metrics": metric_states(setup.metrics),
        "rng": capture_rng(),
    }


def restore(setup: TrainingSetup, state: dict[str, Any], clocks: ForgettingClocks,
            history: list[dict[str, float]]) -> tuple[tuple[int, int], EpochSums]:
    """Put a ``snapshot`` back; returns its position and the sums of the epoch in progress."""
    device = setup.device
    setup.model.load_state_dict(state["model"])
    setup.optimizer.load_state_dict(state["optimizer"])
    setup.scheduler.load_state_dict(state["scheduler"])
    with torch.no_grad():
        for name, value in state["initial_params"].items():
            setup.initial_params[name].copy_(value)
    for key, value in state["clocks"].items():
        setattr(clocks, key, value)
    history.extend(state["history"])
    setup.train_loader.load_state_dict(state["loader"])
    for name, metric_state in state["metrics"].items():
        metric = setup.metrics[name]
        if hasattr(metric, "load_state_dict"):
            metric.load_state_dict(metric_state)
        else:
            vars(metric).update(metric_state)
    sums = state["epoch_sums"]
    restore_rng(state["rng"])
    return (state["epoch"], state["step"]), EpochSums(sums["loss"].to(device), sums["correct"].to(device), sums["seen"])


def train(setup: TrainingSetup, log_metrics: Callable[[dict[str, float], int], None],
          progress: Progress | None = None, *, save_checkpoint: Callable[[dict[str, Any]], Any] | None = None,
          resume_from: dict[str, Any] | None = None, stop: Any = None) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Train for ``config.epochs`` epochs. ``log_metrics(metrics, step)`` gets every epoch's
    figures, starting with the initialization at step 0. Returns (history, summary).

    ``save_checkpoint(state)`` receives a ``snapshot`` (and returns where it saved it) every ``config.checkpoint_every`` epochs,
    after the last one, and when ``stop.requested`` turns true (checked after every step; the
    loop then raises ``Stopped``). ``resume_from``: such a state, to continue from exactly there.
    A non-finite loss or weight raises ``Diverged`` before anything of that epoch is logged.
    """
    config, model, optimizer = setup.config, setup.model, setup.optimizer
    progress = progress or NoProgress()
    stop = stop or NoStop()
    clocks = ForgettingClocks()
    trainable = [p for p in model.parameters() if p.requires_grad]
    # W0 of the trainable parameters; restore() copies into these same tensors.
    initial = [setup.initial_params[name] for name, p in model.named_parameters() if p.requires_grad]
    history: list[dict[str, float]] = []
    l2 = config.l2 if setup.regularizer is not None else 0.0
    forward, autocast = setup.forward_pass()
    memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
    steps_per_epoch = len(setup.train_loader)
    guard = LossGuard(setup.device)

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

    def checkpoint(position: tuple[int, int], sums: EpochSums, loader_state: dict[str, Any]) -> str | None:
        """Where the checkpoint went, for the message of a stopped run; ``None``: none kept."""
        if save_checkpoint is None:
            return None
        return str(save_checkpoint(snapshot(setup, position, clocks, history, sums, loader_state)))

    progress.start(config.epochs, steps_per_epoch)
    done, step, sums = 0, 0, EpochSums.zero(setup.device)
    if resume_from is None:
        record(0, *evaluate(setup, "train"), optimizer.param_groups[0]["lr"])
    else:
        (done, step), sums = restore(setup, resume_from, clocks, history)
        progress.advance(done * steps_per_epoch + step)
    model.train()
    for epoch in range(done + 1, config.epochs + 1):
        loader_state = setup.train_loader.state_dict()  # as this epoch begins, before it draws
        for x, y in epoch_batches(setup.train_loader, step):
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
            sums.loss += loss.detach() * len(y)
            sums.correct += (logits.argmax(1) == y).sum()
            sums.seen += len(y)
            step += 1
            progress.advance(1)
            if guard.tripped(loss):
                raise Diverged(epoch, "the training loss", step=(epoch - 1) * steps_per_epoch + step)
            if stop.requested and step < steps_per_epoch:
                raise Stopped(stop.signum, checkpoint((epoch - 1, step), sums, loader_state))
        train_loss = sums.loss.item() / sums.seen  # the epoch's one host sync for training figures
        if not torch.isfinite(torch.tensor(train_loss)):
            raise Diverged(epoch, "the training loss")
        if not all_finite(model):
            raise Diverged(epoch, "a weight or BatchNorm statistic")
        record(epoch, train_loss, sums.correct.item() / sums.seen, lr)
        step, sums = 0, EpochSums.zero(setup.device)
        every = config.checkpoint_every
        saved = None
        if stop.requested or epoch == config.epochs or (every and epoch % every == 0):
            saved = checkpoint((epoch, 0), sums, setup.train_loader.state_dict())
        if stop.requested:
            raise Stopped(stop.signum, saved)

    summary: dict[str, float] = {}
    for metric in setup.metrics.values():
        if hasattr(metric, "summarize"):
            summary.update(metric.summarize(history))
    return history, summary
