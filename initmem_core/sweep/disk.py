"""How much disk a sweep's checkpoints take, as ``initmem sweep --dry-run`` states it.

A checkpoint holds the model's fp32 parameters, the optimizer's state (none for plain SGD, one
buffer per parameter with momentum, two for an adaptive optimizer) and, with ``--eval-size``, the
selected weights. Parameters are counted on torch's meta device for a nominal input (``NOMINAL``:
the trunk, nearly all of them, does not depend on the dataset). A running cell keeps two
checkpoints, a finished one what ``--keep-checkpoints`` says, and logs its final weights."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from initmem_core.config import RunConfig
from initmem_core.training.clocks import CONVENTION_FAMILIES
from initmem_core.training.plan import RunPlan
from initmem_core.vocabulary import ADAPTIVE_FAMILY

BYTES_PER_VALUE = 4  # fp32 weights and optimizer state, as checkpoints store them


def human_size(size: float) -> str:
    for unit in ("B", "KB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


#: The nominal input the parameters are counted for (module docstring).
NOMINAL = {"in_channels": 3, "num_classes": 10, "image_size": 32}


@dataclass(frozen=True)
class DiskEstimate:
    """Bytes: the checkpoints of every cell running at once (``peak``), those left once the sweep
    is done (``kept``), and the final weights logged to the tracking store (``artifacts``)."""

    peak: int
    kept: int
    artifacts: int
    workers: int


def parameter_count(plan: RunPlan) -> int:
    """The plan's architecture's parameters, counted on the meta device."""
    import torch

    with torch.device("meta"):
        model = plan.components["architecture"].build(**NOMINAL)
    return sum(p.numel() for p in model.parameters())


def checkpoint_bytes(plan: RunPlan, counts: dict[str, int] | None = None) -> int:
    counts = {} if counts is None else counts
    arch = plan.config.arch
    if arch not in counts:
        counts[arch] = parameter_count(plan)
    # Optimizer state per parameter: 2 adaptive (by the plan's clock convention), 1 with momentum, else 0.
    adaptive = CONVENTION_FAMILIES.get(plan.clock) == ADAPTIVE_FAMILY
    state = 2 if adaptive else 1 if plan.config.momentum > 0 else 0
    selected = 1 if plan.config.eval_size else 0  # training.selection: the selected weights, kept
    return counts[arch] * BYTES_PER_VALUE * (1 + state + selected)


def kept_per_cell(config: RunConfig) -> int:
    """Checkpoints a finished cell keeps (``--keep-checkpoints``; none with ``--checkpoint-every 0``)."""
    if config.checkpoint_every == 0 or config.keep_checkpoints == "none":
        return 0
    if config.keep_checkpoints == "all":
        return max(1, -(-config.epochs // config.checkpoint_every))
    return 1


def estimate_disk(plans: Sequence[RunPlan], workers: int = 1) -> DiskEstimate:
    """The disk a sweep's cells (its ``plans``) take (``DiskEstimate``), ``workers`` of them running at once."""
    counts: dict[str, int] = {}
    sizes = [checkpoint_bytes(plan, counts) for plan in plans]
    running = sorted(sizes, reverse=True)[: max(1, workers)]
    cells = [plan.config for plan in plans]
    kept = sum(size * kept_per_cell(config) for size, config in zip(sizes, cells))
    artifacts = sum(counts[config.arch] * BYTES_PER_VALUE for config in cells)
    return DiskEstimate(2 * sum(running) + kept, kept, artifacts, workers)


def disk_text(estimate: DiskEstimate) -> str:
    """One line for ``--dry-run``."""
    return (
        f"disk: checkpoints about {human_size(estimate.kept)} kept once done, at most "
        f"{human_size(estimate.peak)} while {estimate.workers} cell(s) run; final weights in the "
        f"tracking store {human_size(estimate.artifacts)} (`initmem clean NAME` removes the checkpoints)"
    )
