"""How much disk a sweep's checkpoints take, as ``initmem sweep --dry-run`` states it.

A checkpoint holds the model's fp32 parameters, W0, the optimizer's state (as its plugin builds it:
none for plain SGD, one buffer per parameter with momentum, two for Adam) and, with ``--eval-size``,
the selected weights. Parameters are counted on torch's meta device for a nominal input (``NOMINAL``:
the trunk, nearly all of them, does not depend on the dataset). A running cell keeps two
checkpoints, a finished one what ``--keep-checkpoints`` says, and logs its final weights."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from initmem_core.config import RunConfig
from initmem_core.training.plan import RunPlan

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


def values_per_parameter(plan: RunPlan) -> tuple[int, float]:
    """The plan's architecture's parameters and the optimizer state per parameter that its plugin
    keeps: what the optimizer it builds holds after one step of zero gradients, on the meta device
    (on this CPU for an optimizer that cannot step there, as Muon reads a value)."""
    import torch

    for device in ("meta", "cpu"):
        with torch.device(device):
            model = plan.components["architecture"].build(**NOMINAL, **plan.arch_options)
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            optimizer = plan.optimizer.build(model=model, config=plan.config, options=dict(plan.options))
            try:
                optimizer.step()
            except (RuntimeError, NotImplementedError):  # not on the meta device
                continue
        count = sum(p.numel() for p in model.parameters())
        state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim()]
        return count, sum(v.numel() for v in state) / max(count, 1)
    raise AssertionError("the step on this CPU raises")  # unreachable: a CPU step raises itself


def checkpoint_bytes(plan: RunPlan, counts: dict[tuple, tuple[int, float]] | None = None) -> int:
    """A checkpoint: the weights, W0 (the memory metrics' reference), the optimizer's state and,
    with ``--eval-size``, the selected weights (training.selection)."""
    counts = {} if counts is None else counts
    config = plan.config
    key = (config.arch, config.arch_arg, config.opt, config.momentum, config.opt_arg)
    if key not in counts:
        counts[key] = values_per_parameter(plan)
    params, state = counts[key]
    return round(params * BYTES_PER_VALUE * (2 + state + (1 if config.eval_size else 0)))


def kept_per_cell(config: RunConfig) -> int:
    """Checkpoints a finished cell keeps (``--keep-checkpoints``; none with ``--checkpoint-every 0``)."""
    if config.checkpoint_every == 0 or config.keep_checkpoints == "none":
        return 0
    if config.keep_checkpoints == "all":
        return max(1, -(-config.epochs // config.checkpoint_every))
    return 1


def estimate_disk(plans: Sequence[RunPlan], workers: int = 1) -> DiskEstimate:
    """The disk a sweep's cells (its ``plans``) take (``DiskEstimate``), ``workers`` of them running at once."""
    counts: dict[tuple, tuple[int, float]] = {}
    sizes = [checkpoint_bytes(plan, counts) for plan in plans]
    running = sorted(sizes, reverse=True)[: max(1, workers)]
    cells = [plan.config for plan in plans]
    kept = sum(size * kept_per_cell(config) for size, config in zip(sizes, cells))
    weights = {key[:2]: values[0] for key, values in counts.items()}
    artifacts = sum(weights[config.arch, config.arch_arg] * BYTES_PER_VALUE for config in cells)
    return DiskEstimate(2 * sum(running) + kept, kept, artifacts, workers)


def disk_text(estimate: DiskEstimate) -> str:
    """One line for ``--dry-run``."""
    return (
        f"disk: checkpoints about {human_size(estimate.kept)} kept once done, at most "
        f"{human_size(estimate.peak)} while {estimate.workers} cell(s) run; final weights in the "
        f"tracking store {human_size(estimate.artifacts)} (`initmem clean NAME` removes the checkpoints)"
    )
