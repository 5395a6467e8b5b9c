"""Lockstep sweeps: which cells of a sweep train as one fused model, in how many jobs.

The cells of a sweep that differ only in sigma (same seed, same everything else) share their data
order and augmentation (``setup.seed_for(seed, "data-order")``): K of them can train as one fused
model in one process (``lockstep_job``), each model keeping its own child run. A cell fuses only
where its architecture declares a fused form (``contracts.ArchitectureInfo.fused``) and its
optimizer an element-wise update (``contracts.OptimizerInfo.elementwise``): nothing is guessed.

``auto`` (the default of ``--lockstep``) fuses where docs/PERFORMANCE.md measured that it pays:
on the CPU, for images of at most ``AUTO_MAX_PIXELS`` pixels at batches of at most
``AUTO_MAX_BATCH``: whole sweep processes (benchmarks/lockstep.py, b = 32, --workers 2) ran 1.33x
faster fused on 8x8 digits and 2.07x on 28x28 Fashion-MNIST at its presets' sizes (the bare training
loops alone, at b = 128 on 28x28, did not pay: 0.65x to 1.01x; evaluation, start-up and tracking are
shared by a fused job). Not for larger images (CIFAR's 32x32: not measured), and not on a GPU until a
lease measures the product path (benchmarks/gpu_check.py).
Imports no torch: the dry run and the executors plan with it.

Every executor plans alike (``Lockstep``): the local one hands a fused job to a worker, Ray and
Slurm submit it as one task or job with one cell's resources (``remote_cell.run_remote_job``).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError, RunWarning
from initmem_core.plugin_system.registry import Registry
from initmem_core.sweep.executor import SweepCells

#: What ``--lockstep`` takes: ``auto`` fuses where it was measured to pay, ``on`` wherever it can.
MODES = ("auto", "on", "off")
DEFAULT_MAX = 8  # models in one fused job: the GPU's measured K (docs/PERFORMANCE.md)
AUTO_MAX_PIXELS = 28 * 28
AUTO_MAX_BATCH = 64
#: Cells per hour fused over unfused, for the dry run's estimate: benchmarks/lockstep.py on
#: digits (docs/PERFORMANCE.md).
MEASURED_SPEEDUP = 1.3


def duration_text(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def check_mode(mode: str | bool | None, max_models: int) -> str:
    """``--lockstep``'s value as one of ``MODES`` (a sweep file's ``true``/``false`` too)."""
    if mode is None:
        mode = "auto"
    if isinstance(mode, bool):
        mode = "on" if mode else "off"
    if mode not in MODES:
        raise ConfigError(f"--lockstep must be one of {', '.join(MODES)}, got '{mode}'")
    if max_models < 2:
        raise ConfigError(f"--lockstep-max must be 2 or more (models in one fused job), got {max_models}")
    return mode


def refusal(config: RunConfig, registry: Registry) -> str:
    """Why this cell cannot train fused with others ("" when it can)."""
    arch, _ = registry.lookup("architecture", config.arch)
    if not arch.info.fused:
        return f"--arch {config.arch} declares no fused form"
    opt, _ = registry.lookup("optimizer", config.opt)
    if not opt.info.elementwise:
        return f"--opt {config.opt} does not declare an element-wise update"
    if config.compile:
        return "--compile is not fused"
    if config.lr_match_sigma:
        return "--lr-match-sigma gives each sigma its own rates"
    return ""


def not_measured_to_pay(config: RunConfig, registry: Registry, gpu: bool | None = None) -> str:
    """``auto``: why fusing is not chosen for this cell ("" when it is). ``gpu``: whether the
    machine the cell trains on has one (``None``: this machine, as a local worker's)."""
    if config.device not in ("cpu", "auto") or (_has_gpu() if gpu is None else gpu):
        return "auto fuses on the CPU only (a GPU's product path is not measured yet: --lockstep on)"
    spec, _ = registry.lookup("dataset", config.data)
    shape = spec.info.shape
    if shape is None or shape[1] * shape[2] > AUTO_MAX_PIXELS or config.batch_size > AUTO_MAX_BATCH:
        return (
            f"auto fuses images of at most {AUTO_MAX_PIXELS} pixels at batches of at most {AUTO_MAX_BATCH}, "
            "where it was measured to pay (--lockstep on fuses anyway)"
        )
    return ""


def _has_gpu() -> bool:
    from initmem_plugins.executors.placement import visible_gpus

    return bool(visible_gpus())


def fusion_key(config: RunConfig, position: Any = None) -> str:
    """What cells of one fused job share: everything but sigma (and where a resumed cell stands)."""
    values = config.to_dict()
    values.pop("sigma", None)
    return json.dumps([values, position], sort_keys=True, default=str)


@dataclass
class LockstepPlan:
    """The jobs of a sweep's cells: each a list of cells, fused when it holds more than one."""

    jobs: list[list[Any]] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)  # why cells run alone -> how many

    @property
    def fused(self) -> list[list[Any]]:
        return [job for job in self.jobs if len(job) > 1]

    def lines(self) -> list[str]:
        """What the sweep says of it: the fused jobs, then one line per reason cells run alone."""
        fused = self.fused
        cells = sum(len(job) for job in fused)
        lines = [f"lockstep: {cells} cells fuse into {len(fused)} job(s) of {', '.join(str(len(j)) for j in fused)}"]
        if not fused:
            lines = ["lockstep: no cells fuse"]
        lines += [f"lockstep: {count} cell(s) run alone: {reason}" for reason, count in self.reasons.items()]
        return lines


def plan_lockstep(
    cells: Iterable[Any],
    registry: Registry,
    mode: str,
    max_models: int = DEFAULT_MAX,
    config_of=lambda cell: cell.config,
    position_of=lambda cell: None,
    gpu: bool | None = None,
) -> LockstepPlan:
    """Group ``cells`` (CellOutcomes, or anything ``config_of`` reads a config from) into jobs of
    at most ``max_models``, balanced (7 at most 4: 4 and 3). ``position_of``: where a resumed
    cell's checkpoint stands; cells fuse only with cells at the same point. ``gpu``: whether the
    cells train on a machine with a GPU (``auto``'s rule; ``None``: this machine)."""
    plan = LockstepPlan()
    if mode == "off":
        plan.jobs = [[cell] for cell in cells]
        return plan
    groups: dict[str, list[Any]] = {}
    for cell in cells:
        config = config_of(cell)
        reason = refusal(config, registry) or (not_measured_to_pay(config, registry, gpu) if mode == "auto" else "")
        if reason:
            plan.reasons[reason] = plan.reasons.get(reason, 0) + 1
            plan.jobs.append([cell])
            continue
        groups.setdefault(fusion_key(config, position_of(cell)), []).append(cell)
    for group in groups.values():
        if len(group) == 1:
            reason = "no other sigma of its seed and settings to fuse with"
            plan.reasons[reason] = plan.reasons.get(reason, 0) + 1
        parts = -(-len(group) // max_models)
        size, extra = divmod(len(group), parts)
        start = 0
        for index in range(parts):
            end = start + size + (index < extra)
            plan.jobs.append(group[start:end])
            start = end
    return plan


def lockstep_jobs(cells: list, sweep: SweepCells, mode: str, max_models: int, gpu: bool | None = None) -> LockstepPlan:
    """The sweep's cells as jobs: sigma groups fused (``lockstep``), the rest one cell each; a
    resumed cell fuses only with cells whose checkpoints, as this machine sees them, stand where
    its own does (a remote job regroups its cells by where they stand there: ``run_remote_job``)."""

    def position(cell) -> Any:
        if not cell.resume:
            return None
        from initmem_core.training.plan import plan_run  # lazy: the training code
        from initmem_core.training.resume import find_resumable

        point = find_resumable(plan_run(cell.config, sweep.registry, sweep.uri).checkpoints)
        return None if point is None else (point.epoch, point.step)

    return plan_lockstep(cells, sweep.registry, mode, max_models, position_of=position, gpu=gpu)


@dataclass(frozen=True)
class Lockstep:
    """An executor's ``--lockstep`` and ``--lockstep-max``: its sweep's jobs, and what it says of
    them (the same lines whichever executor runs them). ``gpu``: whether its cells train on a GPU
    (a remote executor knows it from its request; ``None``: this machine's, as a local worker's)."""

    mode: str = "off"
    max_models: int = DEFAULT_MAX
    gpu: bool | None = None

    @classmethod
    def of(cls, mode: str | bool | None, max_models: int, gpu: bool | None = None) -> Lockstep:
        return cls(check_mode(mode, max_models), max_models, gpu)

    def jobs(self, cells: list, sweep: SweepCells) -> list[list]:
        """The cells' jobs (one cell each when off), with one line per fused set and per reason
        cells run alone, as warnings (the CLI prints them); ``auto``, the default, says nothing
        where nothing fuses (a sweep that never asked for lockstep hears nothing of it)."""
        if self.mode == "off":
            return [[cell] for cell in cells]
        plan = lockstep_jobs(cells, sweep, self.mode, self.max_models, self.gpu)
        for line in plan.lines() if plan.fused or self.mode == "on" else []:
            warnings.warn(line, RunWarning, stacklevel=3)
        return plan.jobs

    def dry_run_lines(
        self, configs: list[RunConfig], seconds: float, pin: Callable[[RunConfig], RunConfig] = lambda c: c
    ) -> list[str]:
        """What ``--lockstep`` would do with these cells (the dry run's lines): which fuse, into
        how many jobs, and the estimated time each way (fused jobs at the speed-up measured for
        them, docs/PERFORMANCE.md). ``pin``: the executor's, which sets what a cell runs under."""
        if self.mode == "off":
            return []
        from initmem_core.plugin_system.loader import get_registry

        configs = [pin(config) for config in configs]
        plan = plan_lockstep(configs, get_registry(), self.mode, self.max_models, config_of=lambda c: c, gpu=self.gpu)
        if not plan.fused and self.mode == "auto":
            return []
        fused = sum(len(job) for job in plan.fused)
        share = (len(configs) - fused + fused / MEASURED_SPEEDUP) / max(len(configs), 1)
        return [
            *plan.lines(),
            f"lockstep: {len(plan.jobs)} job(s); estimated time {duration_text(seconds * share)} fused, "
            f"{duration_text(seconds)} unfused (fused jobs at {MEASURED_SPEEDUP:g}x: docs/PERFORMANCE.md)",
        ]
