"""``--compile`` that holds over a sweep: compiled once per process and architecture, never
falling back to eager in silence.

TorchDynamo keeps what it compiled per code object, and every CIFAR ResNet depth (20, 56, 110)
runs the one ``CifarResNet.forward``: each depth adds its own cache entries to it (training and
evaluation mode, evaluation once static and once dynamic in the batch, since the splits end in
batches of other sizes). Past ``recompile_limit`` entries (``cache_size_limit`` before torch
2.6; 8 by default) Dynamo stops compiling that code and runs it eagerly from then on, with one
log line. So the limit is raised to ``ENTRIES_PER_ARCHITECTURE`` per architecture compiled in
the process, and every such fallback is counted (``fallbacks``): the runner tags the run with
the count and warns when it is not 0.

The training graph stays static: the one batch of an epoch that is smaller than ``--batch-size``
(45,000 / 128 leaves 72) runs through the eager model, rather than making Dynamo recompile the
training graph dynamic in the batch after epoch 1. It computes what the compiled model computes
(to rounding), so nothing about the run's numbers or its config hash changes, at the cost of one
eager step per epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

#: Dynamo cache entries one architecture needs in a process: training, evaluation static and
#: evaluation dynamic (3), with room for guards a plugin's architecture adds.
ENTRIES_PER_ARCHITECTURE = 8

#: How Dynamo's log line on giving up starts (``convert_frame``, torch 2.4-2.14).
FALLBACK_LINE = "torch._dynamo hit config."

_architectures: set[str] = set()


class _FallbackCounter(logging.Handler):
    """Counts Dynamo's lines that say it gave up compiling a frame and runs it eagerly."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith(FALLBACK_LINE):
            self.count += 1


_counter = _FallbackCounter()


def watch_fallbacks() -> None:
    """Start counting ``fallbacks`` (idempotent; ``compiled`` calls it)."""
    logger = logging.getLogger("torch._dynamo")  # convert_frame's logger propagates to it
    if _counter not in logger.handlers:
        logger.addHandler(_counter)


def fallbacks() -> int:
    """How many times, in this process so far, Dynamo gave up compiling a frame (its recompile
    limit reached) and ran it eagerly. Counted from the first ``compiled`` model on."""
    return _counter.count


def limit_name() -> str:
    """The name of Dynamo's per-code recompile limit in the installed torch."""
    return "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"


def size_recompile_limit(arch: str) -> int:
    """Raise (never lower) Dynamo's recompile limit to ``ENTRIES_PER_ARCHITECTURE`` for each
    architecture compiled in this process, ``arch`` included; returns the limit now in force."""
    _architectures.add(arch)
    config = torch._dynamo.config
    name = limit_name()
    needed = ENTRIES_PER_ARCHITECTURE * len(_architectures)
    if getattr(config, name) < needed:
        setattr(config, name, needed)
    # torch < 2.5 guards on each module instance unless told to inline them (the default since
    # 2.5, where reading the flag warns): every cell would compile again.
    if torch.__version__ < "2.5":
        config.inline_inbuilt_nn_modules = True
    return int(getattr(config, name))


class StaticBatches:
    """The compiled model for training batches of ``batch_size`` and for evaluation; the eager
    model for a training batch of any other size (an epoch's last, partial one)."""

    def __init__(self, model: torch.nn.Module, compiled: Callable[..., torch.Tensor], batch_size: int):
        self.model, self.compiled, self.batch_size = model, compiled, batch_size

    def __call__(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if self.model.training and x.shape[0] != self.batch_size:
            return self.model(x, *args, **kwargs)
        return self.compiled(x, *args, **kwargs)


def compiled(model: torch.nn.Module, config: Any) -> Callable[..., torch.Tensor]:
    """``--compile``: the model wrapped once per run (``StaticBatches`` over ``torch.compile``).
    A later cell of the same architecture (another instance, other weights) reuses what Dynamo
    compiled for the first: compiled once per process and architecture."""
    if not config.compile:
        return model
    watch_fallbacks()
    size_recompile_limit(config.arch)
    return StaticBatches(model, torch.compile(model, mode=config.compile_mode), config.batch_size)
