"""What a sweep costs before it runs (``initmem sweep --dry-run``): its training time on this machine,
from a few measured steps of each architecture on one thread (as a local worker runs), and on a
GPU, from ``benchmarks/gpu_check.py``'s figures (``GPU_FIGURES``, package data).

Evaluation is counted at every evaluation point (``evaluated_examples``) at the measured forward
time per example; start-up (data, model, the tracking store) is not. A dataset's sizes are what its
plugin declares (``contracts.DatasetInfo``), else read from the dataset built here.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from initmem_core.config import RunConfig
from initmem_core.training.plan import RunPlan

#: gpu_check's JSON of every sample, kept beside this module (package data) by a complete run on a GPU.
GPU_FIGURES: Traversable = resources.files(__package__) / "gpu_check.json"
#: Time one architecture's measurement may take, and the smallest batch it scales from.
MEASURE_BUDGET_S, SMALL_BATCH = 0.5, 4


@dataclass(frozen=True)
class StepTime:
    """One architecture's measured training step on this machine."""

    arch: str
    batch_size: int  # the sweep's
    shape: tuple[int, int, int]  # C, H, W
    seconds: float  # per step at batch_size (scaled when measured_batch is smaller)
    measured_batch: int
    #: a forward pass without gradient, per example (evaluation)
    eval_seconds_per_example: float = 0.0


@dataclass(frozen=True)
class CostEstimate:
    """A sweep's estimated training time. ``None``: not known here (``unknown`` says why)."""

    workers: int
    steps: int | None  # optimizer steps of every cell counted
    cpu_seconds: float | None  # training and evaluation, with ``workers``
    step_times: list[StepTime] = field(default_factory=list)
    gpu_seconds: float | None = None
    gpu_source: str = ""  # where the GPU figures come from, or that none exist
    unknown: list[str] = field(default_factory=list)
    #: of ``cpu_seconds``: the evaluation's share (examples scored, forward passes only)
    eval_seconds: float | None = None
    evaluated_examples: int | None = None


def evaluated_examples(config: RunConfig, epochs: int, n_train: int, splits: tuple[int, int]) -> int:
    """The examples a run scores over its evaluation points (epoch 0, every ``eval_every``-th,
    the last), and the whole test split once more when ``eval_size`` capped it."""
    val, test = splits
    points = sum(1 for epoch in range(epochs + 1) if epoch % config.eval_every == 0 or epoch == epochs)
    cap = config.eval_size
    per_point = (
        min(config.train_eval_size or n_train, n_train)
        + (min(cap, val) if cap else val)
        + (min(cap, test) if cap else test)
    )
    return points * per_point + (test if cap and cap < test else 0)


@dataclass(frozen=True)
class DatasetFacts:
    """What the estimate needs of a cell's dataset: its image shape (C, H, W), classes and split sizes
    (``train`` cut to ``--train-size``)."""

    shape: tuple[int, int, int]
    classes: int
    train: int
    val: int
    test: int


def dataset_facts(plan: RunPlan) -> DatasetFacts | None:
    """A cell's dataset as its plugin declares it (``contracts.DatasetInfo``), else as built here;
    ``None`` when neither says (a dataset not on this machine that declares nothing)."""
    config, dataset = plan.config, plan.components["dataset"]
    info = dataset.spec.info
    if info.shape and info.classes and info.splits:
        train, val, test = info.splits
        train = min(train, config.train_size) if config.train_size else train
        return DatasetFacts(info.shape, info.classes, train, val, test)
    try:
        bundle = dataset.build(config=config)
    except Exception:  # not on this machine
        return None
    shape = (bundle.in_channels, *bundle.train_x.shape[2:])
    return DatasetFacts(shape, bundle.num_classes, len(bundle.train_y), len(bundle.val_y), len(bundle.test_y))


def measure_step(
    plan: RunPlan, shape: tuple[int, int, int], classes: int, budget_s: float = MEASURE_BUDGET_S
) -> StepTime:
    """The median time of a few SGD training steps of the plan's architecture at its batch size on
    random inputs, on one thread; at a smaller batch, scaled linearly, when a full step would not
    fit ``budget_s``."""
    import torch
    import torch.nn.functional as F

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        arch, batch_size = plan.config.arch, plan.config.batch_size
        model = plan.components["architecture"].build(
            in_channels=shape[0], num_classes=classes, image_size=shape[1], **plan.arch_options
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

        def step(batch: int) -> float:
            x, y = torch.randn(batch, *shape), torch.randint(0, classes, (batch,))
            began = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            return time.perf_counter() - began

        small = min(batch_size, SMALL_BATCH)
        step(small)  # warm-up: allocations, kernel choice
        batch, per_example = small, step(small) / small
        # The largest batch (up to the sweep's) of which three steps fit the budget. A small batch's
        # time per example holds the step's fixed cost, which makes the first guess small: it is
        # guessed again from the larger batch once, and the larger the batch, the less scaling.
        for _ in range(2):
            guess = max(small, min(batch_size, int(budget_s / 3 / per_example)))
            if guess <= batch:
                break
            batch, per_example = guess, step(guess) / guess
        seconds = sorted(step(batch) for _ in range(3))[1] * batch_size / batch

        model.eval()  # evaluation: a forward pass without gradient, at up to the evaluation batch
        with torch.no_grad():
            size = max(1, min(plan.config.eval_batch_size, 4 * batch))
            x = torch.randn(size, *shape)
            model(x)  # warm-up

            def forward_pass() -> float:
                began = time.perf_counter()
                model(x)
                return time.perf_counter() - began

            forward = sorted(forward_pass() for _ in range(3))[1] / size
        return StepTime(arch, batch_size, shape, seconds, batch, forward)
    finally:
        torch.set_num_threads(threads)


def gpu_step_ms(arch: str, path: Path | Traversable = GPU_FIGURES) -> tuple[float, str] | None:
    """gpu_check's ms per training step for ``arch`` (fp32, eager, contiguous where measured, else
    its fastest configuration) and a note of what it is; ``None`` without a figure for it."""
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        return None

    def walk(node: Any) -> Iterator[dict[str, Any]]:
        if isinstance(node, dict) and node.get("arch") == arch and isinstance(node.get("step_ms"), (int, float)):
            yield node
        for value in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
            yield from walk(value)

    rows = [row for row in walk(results) if row["step_ms"] > 0]
    if not rows:
        return None
    plain = [
        r for r in rows if r.get("precision") == "fp32" and not r.get("compile_mode") and not r.get("channels_last")
    ]
    row = plain[0] if plain else min(rows, key=lambda r: r["step_ms"])
    machine = results.get("machine") if isinstance(results, dict) else None
    device = machine.get("gpu") if isinstance(machine, dict) else None  # gpu_check's machine record
    what = "fp32 eager" if plain else f"{row.get('precision', '?')}, compile {row.get('compile_mode') or 'off'}"
    return float(row["step_ms"]), f"{device or 'GPU'}, {what}, gpu_check batch {row.get('batch', 128)}"


def estimate_cost(
    plans: Sequence[RunPlan],
    *,
    workers: int = 1,
    horizons: Sequence[Any] | None = None,
    gpu_figures: Path | Traversable = GPU_FIGURES,
    budget_s: float | None = None,
) -> CostEstimate:
    """The training time of a sweep's cells (its ``plans``) with ``workers`` local workers, each
    cell's steps from ``horizons`` (``training.plan.plan_horizons``) where known, else from
    its dataset's size; one step measurement per architecture, batch size and input shape, each
    taking up to ``budget_s`` (``MEASURE_BUDGET_S``, read at the call: the tests lower it)."""
    budget = MEASURE_BUDGET_S if budget_s is None else budget_s
    workers = max(1, int(workers))
    facts: dict[tuple[Any, ...], DatasetFacts | None] = {}
    measured: dict[tuple[Any, ...], StepTime] = {}
    gpu: dict[str, tuple[float, str] | None] = {}
    steps_total, cpu_total, gpu_total, eval_total, examples_total = 0, 0.0, 0.0, 0.0, 0
    unknown: list[str] = []
    for index, plan in enumerate(plans):
        cell = plan.config
        data = (cell.data, cell.data_dir, cell.train_size)
        if data not in facts:
            facts[data] = dataset_facts(plan)
        known = facts[data]
        if known is None:
            unknown.append(f"{cell.data}: neither readable here nor declared by its plugin (shape, sizes)")
            continue
        horizon = horizons[index] if horizons else None
        epochs = horizon.epochs if horizon else cell.epochs
        steps = epochs * (horizon.steps_per_epoch if horizon else math.ceil(known.train / cell.batch_size))
        key = (cell.arch, known.shape, known.classes, cell.batch_size)
        if key not in measured:
            measured[key] = measure_step(plan, known.shape, known.classes, budget)
        scored = evaluated_examples(cell, epochs, known.train, (known.val, known.test))
        steps_total += steps
        cpu_total += steps * measured[key].seconds
        examples_total += scored
        eval_total += scored * measured[key].eval_seconds_per_example
        if cell.arch not in gpu:
            gpu[cell.arch] = gpu_step_ms(cell.arch, gpu_figures)
        figure = gpu[cell.arch]
        gpu_total += steps * figure[0] / 1e3 if figure else math.nan
    counted = len(plans) - len(unknown)
    notes = sorted({figure[1] for figure in gpu.values() if figure})
    if not gpu_figures.is_file():
        source = (
            f"no gpu_check figures exist yet ({gpu_figures.name} is written by a complete benchmarks/gpu_check.py run)"
        )
    elif not gpu or any(figure is None for figure in gpu.values()):
        missing = sorted(arch for arch, figure in gpu.items() if figure is None)
        source = f"gpu_check measured no step of {', '.join(missing) or 'these architectures'}"
    else:
        source = f"gpu_check: {'; '.join(notes)}"
    return CostEstimate(
        workers=workers,
        steps=steps_total if counted else None,
        cpu_seconds=(cpu_total + eval_total) / workers if counted else None,
        eval_seconds=eval_total / workers if counted else None,
        evaluated_examples=examples_total if counted else None,
        step_times=list(measured.values()),
        gpu_seconds=gpu_total if counted and not math.isnan(gpu_total) and gpu else None,
        gpu_source=source,
        unknown=sorted(set(unknown)),
    )
