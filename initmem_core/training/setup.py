"""Everything a run is made of, built from its config: data, model, initialization, optimizer,
schedule, regularizer and metrics, on the device the config asks for."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from initmem_core.config import RunConfig
from initmem_core.contracts import DatasetBundle, Metric, Regularizer, record_param_groups
from initmem_core.errors import ConfigError
from initmem_core.training.compiling import compiled
from initmem_core.training.effective_step import match_effective_step
from initmem_core.training.loaders import EvalLoader, TrainLoader, make_loaders
from initmem_core.training.plan import RunPlan
from initmem_core.training.precision import LEGACY, tf32_api, use_precision
from initmem_core.training.schedules import RateSchedule


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
    """Everything a run is made of, built from its plan before any tracking starts."""

    plan: RunPlan
    device: torch.device
    dataset: DatasetBundle
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: RateSchedule  # sets the rates at each step (a function of the step: no checkpointed state)
    regularizer: Regularizer | None
    metrics: dict[str, Metric]
    train_loader: TrainLoader
    eval_loaders: dict[str, EvalLoader]
    initial_params: dict[str, torch.Tensor]
    forward: Callable[..., torch.Tensor] | None = None  # the model, compiled with --compile (built once)

    def __post_init__(self) -> None:
        if self.forward is None:
            self.forward = compiled(self.model, self.config)

    @property
    def config(self) -> RunConfig:
        """The config the run trains: the plan's (``RunPlan.trains``, with --until's epochs)."""
        return self.plan.trains

    def forward_pass(self) -> tuple[Callable[..., torch.Tensor], Callable[[], Any]]:
        """The model call and the autocast context that training and evaluation both use (see
        --compile, --amp): what is evaluated is what is trained, at the same precision."""
        assert self.forward is not None
        if self.config.amp == "bf16":
            return self.forward, lambda: torch.autocast(self.device.type, dtype=torch.bfloat16)
        return self.forward, contextlib.nullcontext

    @property
    def memory_format(self) -> torch.memory_format:
        return memory_format(self.config)

    def penalized(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The trainable parameters and their W0, as matching lists (what a regularizer sees)."""
        named = [(name, p) for name, p in self.model.named_parameters() if p.requires_grad]
        return [p for _, p in named], [self.initial_params[name] for name, _ in named]


#: What cuBLAS needs to be deterministic: a fixed workspace, read once, when CUDA first creates a
#: cuBLAS handle in the process (so it must be set before CUDA starts, not when a run asks).
CUBLAS_WORKSPACE = ":4096:8"
DETERMINISTIC_CUBLAS = (":4096:8", ":16:8")


def prepare_cuda_environment() -> None:
    """Called before CUDA starts in a process that runs cells (``initmem run``, sweep workers):
    a ``--deterministic`` run later in the same process then still gets a deterministic cuBLAS.
    Costs a few MB of workspace per stream; a value the user set is left alone."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)


def use_determinism(deterministic: bool, device: torch.device) -> None:
    """``--deterministic``: kernels that give the same bits on every run, where a device has a
    choice (GPUs). The setting is process-wide, so it follows the config of each run built (and
    ``process_settings_kept`` puts it back when the run ends).
    Otherwise cuDNN benchmarks its convolution algorithms once per shape and keeps the fastest."""
    if deterministic and device.type == "cuda":
        workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
        if workspace not in DETERMINISTIC_CUBLAS:
            if torch.cuda.is_initialized():  # too late: cuBLAS read the variable when CUDA started
                raise ConfigError(
                    f"--deterministic on CUDA needs CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE} before "
                    f"CUDA starts, and this process started CUDA with {workspace or 'it unset'}; "
                    f"set it in the environment (export CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE})"
                )
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    if torch.are_deterministic_algorithms_enabled() != deterministic:  # the call costs seconds
        torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    # Benchmarking picks kernels by timing, which differs run to run; on CPU it changes nothing.
    torch.backends.cudnn.benchmark = not deterministic


@contextlib.contextmanager
def process_settings_kept() -> Iterator[None]:
    """The process-wide settings a run's setup changes (torch's threads, deterministic kernels,
    cuDNN's benchmarking, TF32, cuBLAS's workspace variable) put back as they were when the run
    ends, however it ends: a run called from Python (a notebook, a test, a sweep worker between
    cells) leaves its process as it found it."""
    backends = torch.backends
    cudnn: Any = backends.cudnn  # conv and rnn: torch >= 2.9's fp32_precision holders, untyped
    flags = [(cudnn, "deterministic"), (cudnn, "benchmark")]
    if tf32_api(backends) == LEGACY:
        flags += [(backends.cuda.matmul, "allow_tf32"), (cudnn, "allow_tf32")]
    else:
        flags += [(backends.cuda.matmul, "fp32_precision"), (cudnn.conv, "fp32_precision")]
        flags += [(cudnn.rnn, "fp32_precision")]
    saved = [getattr(holder, name) for holder, name in flags]
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    try:
        yield
    finally:
        for (holder, name), value in zip(flags, saved):
            setattr(holder, name, value)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        if torch.are_deterministic_algorithms_enabled() != deterministic:  # the call costs seconds
            torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        if workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = workspace


def use_device(device: torch.device) -> torch.device:
    """Make a GPU the run's own: the current device of this process, so streams, events, pinned
    memory and the CUDA RNG it reaches without naming a device are on it, not on GPU 0."""
    if device.type == "cuda":
        index = torch.cuda.current_device() if device.index is None else device.index
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return device


def memory_format(config: RunConfig) -> torch.memory_format:
    return torch.channels_last if config.channels_last else torch.contiguous_format


def eval_subset(bundle: DatasetBundle, size: int, data_seed: int) -> DatasetBundle:
    """``--eval-size``: at most ``size`` validation and test examples, the same ones at every seed
    and sigma (chosen by ``data_seed`` alone, kept in their original order). What is scored at
    every evaluation point; the selected checkpoint is also scored on the whole test split."""
    changes = {}
    for split in ("val", "test"):
        x, y = getattr(bundle, f"{split}_x"), getattr(bundle, f"{split}_y")
        if 0 < size < len(y):
            generator = torch.Generator().manual_seed(seed_for(data_seed, f"eval-subset-{split}"))
            keep = torch.randperm(len(y), generator=generator)[:size].sort().values
            changes.update({f"{split}_x": x[keep], f"{split}_y": y[keep]})
    return dataclasses.replace(bundle, **changes) if changes else bundle


def build_setup(plan: RunPlan) -> TrainingSetup:
    """Build data, model, initialization, optimizer, schedule, regularizer and metrics from a run's
    plan (``training.plan.plan_run``): the config it trains is the plan's (``RunPlan.trains``)."""
    prepare_cuda_environment()  # the first run of a process builds its setup before CUDA starts
    config = plan.trains
    if config.threads:
        torch.set_num_threads(config.threads)
    device = use_device(resolve_device(config.device))
    use_determinism(config.deterministic, device)
    use_precision(config.tf32)
    component = plan.components
    whole = component["dataset"].build(config=config)
    dataset = eval_subset(whole, config.eval_size, config.data_seed)
    # --eval-size caps what is scored every epoch; the selected checkpoint is scored once on every
    # test example (training.selection), so the whole split is kept beside the capped one.
    full_test = (whole.test_x, whole.test_y) if len(dataset.test_y) < len(whole.test_y) else None
    if config.data_dir and dataset.reads_files is False:
        raise ConfigError(
            f"--data-dir: dataset {config.data} reads no files (it is generated or bundled), "
            "so the folder would be ignored; leave --data-dir out"
        )
    n_train = len(dataset.train_y)
    if config.batch_size > n_train:
        raise ConfigError(
            f"--batch-size {config.batch_size} is larger than the training set of {config.data} "
            f"({n_train} examples); use at most {n_train}"
        )
    if plan.n_train not in (None, n_train):  # --until found its epochs for the declared size
        raise ConfigError(
            f"--until: dataset {config.data} declares {plan.n_train} training examples (its plugin's "
            f"splits=, after --train-size) but has {n_train}; its declared sizes must be what it builds"
        )

    # The architecture's own init draws from the global RNG: seed it so that draw is the
    # paired Z of this seed (scaled-default relies on it), whatever sigma is.
    torch.manual_seed(config.seed)
    model = component["architecture"].build(
        **plan.arch_options,
        in_channels=dataset.in_channels,
        num_classes=dataset.num_classes,
        image_size=dataset.image_size,
    )
    init_generator = torch.Generator().manual_seed(seed_for(config.seed, "init"))
    component["initializer"].build(model=model, sigma=config.sigma, generator=init_generator)
    model.to(device, memory_format=memory_format(config))
    initial_params = {name: p.detach().clone() for name, p in model.named_parameters()}

    optimizer = plan.optimizer.build(model=model, config=config, options=dict(plan.options))
    if config.lr_match_sigma:  # before the scheduler, which takes each group's rate as its base
        record_param_groups(optimizer, match_effective_step(optimizer, model, config))
    train_loader, eval_loaders = make_loaders(
        dataset,
        config,
        device,
        torch.Generator().manual_seed(seed_for(config.seed, "data-order")),
        subset_generator=torch.Generator().manual_seed(seed_for(config.data_seed, "train-eval-subset")),
        full_test=full_test,
    )
    scheduler = RateSchedule(optimizer, config, len(train_loader))
    regularizer = component["regularizer"].build(coefficient=config.l2) if config.l2 > 0 else None
    # The metrics every run computes (registered with default=True), then the config's own.
    metrics = {name: metric.build(config=config) for name, metric in plan.metrics.items()}
    return TrainingSetup(
        plan,
        device,
        dataset,
        model,
        optimizer,
        scheduler,
        regularizer,
        metrics,
        train_loader,
        eval_loaders,
        initial_params,
    )
