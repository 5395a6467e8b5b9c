"""initmem against the bare alternatives, side by side in one process: is the framework free?

    python -m benchmarks.bench                       # the full benchmark (~7-10 min on 2 CPU cores)
    python -m benchmarks.bench --quick --json q.json  # every section, tiny sizes (< 1 min): a smoke test
    python -m benchmarks.bench --device cuda --channels-last --amp bf16 --compile

Four comparisons, each measured by interleaving repetitions of its sides in this process, after
warm-up repetitions that are not counted:

1. ``train``: training throughput (images/s) of initmem's own loop (``build_setup`` + ``train``)
   against a bare hand-written PyTorch loop: same model and initialization, same optimizer
   class and hyperparameters, same batch size and device, synthetic 3x32x32 data resident on
   the device, same thread count. Target: initmem / bare >= 0.97 for resnet20 and resnet9.
2. ``pipeline``: one epoch of CIFAR-shaped uint8 images with augmentation (crop + flip), no
   model: ``DeviceLoader`` against ``TorchvisionLoader`` (DataLoader + transforms v2, what
   ``--loader torchvision`` uses). Target: >= 10x.
3. ``tracking``: a full digits run (``initmem_core.run``) with MLflow tracking to a fresh,
   pre-created SQLite store (with the checkpoints a tracked run keeps by default, and without)
   against ``tracking=False``. Target: <= 2% more wall time.
4. ``cli``: wall time of ``initmem --help`` and ``initmem plugins`` against ``python -c pass``
   (fresh processes), and whether torch or mlflow get imported. Target: < 0.5 s each, no torch.

How each is timed, and why, is in docs/PERFORMANCE.md. Repetitions alternate their order
(A B, B A, A B, ...) so that a drift in machine speed (another process, clock changes) hits every
side alike; ratios are taken within a repetition (A_i / B_i) and summarised by their median.
The JSON is rewritten after every section, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.machine_info import cpu_model, memory_gib
from initmem_core import get_registry
from initmem_core.config import RunConfig
from initmem_core.training.loaders import DeviceLoader, EvalLoader, TorchvisionLoader
from initmem_core.training.loop import train
from initmem_core.training.plan import plan_run
from initmem_core.training.setup import TrainingSetup, build_setup

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)

TARGETS = {"train": 0.97, "pipeline": 10.0, "tracking": 0.02, "cli": 0.5}


@dataclass(frozen=True)
class Plan:
    """Every size of the benchmark in one place (``--quick`` shrinks them all)."""

    repeats: int = 5
    warmup: int = 1
    batch_size: int = 128
    # Steps per repetition of the training pair (one epoch of synthetic data of exactly that
    # many batches). On 2 CPU cores a repetition takes ~5-15 s.
    train_steps: dict[str, int] = field(default_factory=lambda: {"resnet20": 10, "resnet9": 4})
    # Images per pipeline epoch. Throughput does not depend on it (the per-batch work is the
    # same); 10,000 rather than CIFAR's 50,000 because the torchvision side runs at ~2,000
    # images/s on this CPU, 25 s per 50,000.
    pipeline_images: int = 10_000
    digits_epochs: int = 10
    digits_train_size: int = 0  # 0: all 1,078 training images of the digits split
    # The tracking costs are ~1% of a ~4.5 s run, below the run-to-run noise of this machine
    # (a few %): more pairs than the other sections.
    tracking_repeats: int = 10
    cli_repeats: int = 10
    cli_warmup: int = 1  # rounds of CLI commands run first and not counted (a warm file cache)


QUICK = Plan(
    repeats=1,
    warmup=1,
    batch_size=16,
    train_steps={"resnet20": 2, "resnet9": 1},
    pipeline_images=1_024,
    digits_epochs=1,
    digits_train_size=256,
    tracking_repeats=1,
    cli_repeats=1,
    cli_warmup=0,
)

#: On a GPU a step takes milliseconds: more steps per repetition, so each lasts ~1 s or more.
ACCELERATOR = Plan(train_steps={"resnet20": 300, "resnet9": 200})


# -- measuring ------------------------------------------------------------------------------------


def summary(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "samples": values}


def interleaved(sides: dict[str, Callable[[], float]], repeats: int, warmup: int) -> dict[str, list[float]]:
    """Run every side ``warmup + repeats`` times, in the given order, then reversed, and so on.

    Each callable returns its own measurement; warm-up results are dropped.
    """
    results: dict[str, list[float]] = {name: [] for name in sides}
    for index in range(warmup + repeats):
        order = list(sides) if index % 2 == 0 else list(reversed(sides))
        for name in order:
            value = sides[name]()
            if index >= warmup:
                results[name].append(value)
    return results


def paired_ratios(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True)]


def synchronizer(device: torch.device) -> Callable[[], None]:
    """Wait for queued device work, so a host clock read measures it (a no-op on the CPU)."""
    if device.type == "cuda":
        return torch.cuda.synchronize
    if device.type == "mps":
        return torch.mps.synchronize
    return lambda: None


# -- 1. training throughput -------------------------------------------------------------------------


class EpochTimer:
    """A ``Progress`` for ``train()`` that times each epoch's training steps and nothing else.

    ``train()`` calls ``epoch_done(e - 1)`` after the evaluation that ends epoch ``e - 1`` and
    ``advance(1)`` after every optimizer step, so the span from ``epoch_done`` to the epoch's last
    ``advance`` holds the epoch's batches, steps and bookkeeping, and no evaluation pass. The
    device is synchronised at both ends (the real loop synchronises at the epoch's end too).
    """

    def __init__(self, sync: Callable[[], None]):
        self.sync = sync
        self.steps_per_epoch = 0
        self.step = 0
        self.began = 0.0
        self.epoch_seconds: list[float] = []

    def start(self, epochs: int, steps_per_epoch: int) -> None:
        self.steps_per_epoch = steps_per_epoch

    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None:
        self.sync()
        self.step = 0
        self.began = time.perf_counter()

    def advance(self, steps: int) -> None:
        self.step += steps
        if self.step == self.steps_per_epoch:
            self.sync()
            self.epoch_seconds.append(time.perf_counter() - self.began)


def train_config(arch: str, plan: Plan, args: argparse.Namespace) -> RunConfig:
    if arch not in plan.train_steps:
        raise SystemExit(f"no step count for {arch}: pass --train-steps {arch}=N")
    steps = plan.train_steps[arch]
    return RunConfig(
        arch=arch,
        data=f"synthetic:3x32x32-c10-n{steps * plan.batch_size}",
        batch_size=plan.batch_size,
        epochs=1,
        device=args.device,
        threads=args.threads,
        channels_last=args.channels_last,
        amp=args.amp,
        compile=args.compile,
        eval_batch_size=plan.batch_size,
    )


def shrink_evaluation(setup: TrainingSetup, examples: int) -> None:
    """Evaluate on ``examples`` images per split: evaluation is outside the timed span, so this
    only saves wall time (a full pass over train, val and test per epoch would double it)."""
    for split, loader in list(setup.eval_loaders.items()):
        setup.eval_loaders[split] = EvalLoader(
            loader.x[:examples],
            loader.y[:examples],
            batch_size=loader.batch_size,
            mean=loader.mean.flatten().tolist(),
            std=loader.std.flatten().tolist(),
            pixel_scale=loader.pixel_scale,
            device=loader.device,
        )


class BareLoop:
    """The hand-written baseline: what one writes without a framework, on the same device.

    The model comes from ``build_setup`` so that class, initialization and placement are
    initmem's; the optimizer is built here by hand with the same class and hyperparameters. The
    data is normalised once up front and stays on the device; each epoch shuffles by index.
    """

    def __init__(self, config: RunConfig):
        setup = build_setup(plan_run(config, get_registry()))
        self.device, self.config = setup.device, config
        self.model = setup.model
        if config.opt != "sgd":
            raise SystemExit("the bare loop is written for --opt sgd")
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
        bundle = setup.dataset
        mean = torch.tensor(bundle.mean).view(1, -1, 1, 1)
        std = torch.tensor(bundle.std).view(1, -1, 1, 1)
        self.x = ((bundle.train_x.float() / bundle.pixel_scale - mean) / std).to(self.device)
        self.y = bundle.train_y.to(self.device)
        self.forward = torch.compile(self.model) if config.compile else self.model
        self.sync = synchronizer(self.device)

    def epoch(self) -> float:
        """One epoch of training steps; returns its seconds."""
        model, optimizer, config = self.model, self.optimizer, self.config
        memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
        n, size = len(self.y), config.batch_size
        model.train()
        self.sync()
        began = time.perf_counter()
        order = torch.randperm(n, device=self.device)
        for start in range(0, n, size):
            rows = order[start : start + size]
            x, y = self.x[rows].contiguous(memory_format=memory_format), self.y[rows]
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=config.amp == "bf16"):
                loss = F.cross_entropy(self.forward(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        self.sync()
        return time.perf_counter() - began


def bench_train(arch: str, plan: Plan, args: argparse.Namespace) -> dict[str, Any]:
    config = train_config(arch, plan, args)
    images = plan.train_steps[arch] * plan.batch_size
    setup = build_setup(plan_run(config, get_registry()))
    shrink_evaluation(setup, plan.batch_size)
    timer = EpochTimer(synchronizer(setup.device))

    def initmem_epoch() -> float:
        train(setup, lambda metrics, step: None, timer)
        return images / timer.epoch_seconds[-1]

    bare = BareLoop(config)
    sides = {"initmem": initmem_epoch, "bare": lambda: images / bare.epoch()}
    if args.control:  # an A/A control: a second, identical bare loop shows the noise floor
        again = BareLoop(config)
        sides["bare_again"] = lambda: images / again.epoch()
    rates = interleaved(sides, plan.repeats, plan.warmup)
    initmem, baseline = rates["initmem"], rates["bare"]
    ratios = paired_ratios(initmem, baseline)
    result = {
        "unit": "images/s",
        "batch_size": plan.batch_size,
        "steps": plan.train_steps[arch],
        "initmem": summary(initmem),
        "bare": summary(baseline),
        "ratio": summary(ratios),
        "target": f">= {TARGETS['train']}",
        "met": statistics.median(ratios) >= TARGETS["train"],
    }
    if args.control:
        result["bare_again"] = summary(rates["bare_again"])
        result["control_ratio"] = summary(paired_ratios(rates["bare_again"], baseline))
    return result


# -- 2. input pipeline -------------------------------------------------------------------------------


def bench_pipeline(plan: Plan, args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    sync = synchronizer(device)
    n = plan.pipeline_images
    data = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=data)
    y = torch.randint(0, 10, (n,), generator=data)
    common = dict(
        batch_size=plan.batch_size,
        mean=CIFAR_MEAN,
        std=CIFAR_STD,
        pixel_scale=255.0,
        augment=True,
        shuffle=True,
        device=device,
    )
    loaders = {
        kind: cls(x, y, generator=torch.Generator().manual_seed(1), **common)
        for kind, cls in (("device", DeviceLoader), ("torchvision", TorchvisionLoader))
    }

    def epoch(kind: str) -> Callable[[], float]:
        def run() -> float:
            sync()
            began = time.perf_counter()
            seen = 0
            for _images, labels in loaders[kind]:
                seen += len(labels)
            sync()
            assert seen == n
            return n / (time.perf_counter() - began)

        return run

    rates = interleaved({kind: epoch(kind) for kind in loaders}, plan.repeats, plan.warmup)
    device_rates, torchvision_rates = rates["device"], rates["torchvision"]
    speedups = paired_ratios(device_rates, torchvision_rates)
    return {
        "unit": "images/s",
        "images": n,
        "batch_size": plan.batch_size,
        "num_workers": 0,
        "device": summary(device_rates),
        "torchvision": summary(torchvision_rates),
        "speedup": summary(speedups),
        "target": f">= {TARGETS['pipeline']}x",
        "met": statistics.median(speedups) >= TARGETS["pipeline"],
    }


# -- 3. tracking overhead ------------------------------------------------------------------------------


class TimedTracker:
    """Hands every call to the tracker ``make()`` builds, adding up the seconds spent in them
    (its construction included: opening the store): the tracking cost a run pays in line."""

    def __init__(self, make: Callable[[], Any]):
        began = time.perf_counter()
        self.inner = make()
        self.seconds = time.perf_counter() - began

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if not callable(attribute):
            return attribute

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return attribute(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - began

        return timed_call


def bench_tracking(plan: Plan, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from initmem_core import run
    from initmem_core.tracking.client import ensure_experiment, open_client
    from initmem_core.tracking.tracker import MlflowTracker

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    experiment = "bench"
    # Create the schema (MLflow's migrations take seconds, once per store) and the experiment
    # before anything is timed: that is a one-off cost of a new store, not of a run.
    ensure_experiment(open_client(uri), uri, experiment)
    # The default run config (the device options stay off: what is measured is tracking).
    config = RunConfig(
        epochs=plan.digits_epochs, train_size=plan.digits_train_size, device=args.device, threads=args.threads
    )
    # Seconds each run spent in line, per side: inside tracker calls, and saving checkpoints.
    in_line: dict[str, dict[str, list[float]]] = {
        side: {"tracker": [], "checkpoints": []} for side in ("mlflow_checkpoints", "mlflow", "checkpoints")
    }
    # CPU seconds of this process (every thread) per run: unlike wall time, not inflated when
    # another process takes the core, so it tells a 1% cost apart on a shared machine.
    cpu: dict[str, list[float]] = {"mlflow_checkpoints": [], "mlflow": [], "checkpoints": [], "off": []}

    def timed(side: str, tracking: bool, **changes: Any) -> Callable[[], float]:
        def once() -> float:
            began, cpu_began = time.perf_counter(), time.process_time()
            if tracking:
                tracker = TimedTracker(lambda: MlflowTracker(uri, experiment))
                result = run(config.replace(**changes), tracker=tracker)
            else:
                result = run(config.replace(**changes), tracking=False)
            seconds = time.perf_counter() - began
            cpu[side].append(time.process_time() - cpu_began)
            assert result.status == "FINISHED"
            if side in in_line:
                in_line[side]["tracker"].append(tracker.seconds if tracking else 0.0)
                in_line[side]["checkpoints"].append(result.checkpoint_seconds)
            return seconds

        return once

    # A tracked run keeps a checkpoint beside the store every epoch by default; an untracked run
    # keeps none unless given --checkpoint-dir. Four sides tell the cost of MLflow (with and
    # without checkpoints on both sides) from that of the checkpoints.
    sides = {
        "mlflow_checkpoints": timed("mlflow_checkpoints", True),
        "mlflow": timed("mlflow", True, checkpoint_every=0),
        "checkpoints": timed("checkpoints", False, checkpoint_dir=str(folder / "untracked-checkpoints")),
        "off": timed("off", False),
    }
    times = interleaved(sides, plan.tracking_repeats, plan.warmup)
    for values in [*cpu.values(), *(v for parts in in_line.values() for v in parts.values())]:
        del values[: plan.warmup]

    def overhead(side: str, baseline: str, measure: dict[str, list[float]] = times) -> dict[str, Any]:
        return summary([ratio - 1 for ratio in paired_ratios(measure[side], measure[baseline])])

    overheads = {
        "mlflow": overhead("mlflow", "off"),  # the comparison: tracking on vs off
        "mlflow_with_checkpoints": overhead("mlflow_checkpoints", "checkpoints"),
        "checkpoints": overhead("checkpoints", "off"),
        "default_vs_bare": overhead("mlflow_checkpoints", "off"),
    }
    cpu_overheads = {
        "mlflow": overhead("mlflow", "off", cpu),
        "mlflow_with_checkpoints": overhead("mlflow_checkpoints", "checkpoints", cpu),
        "checkpoints": overhead("checkpoints", "off", cpu),
        "default_vs_bare": overhead("mlflow_checkpoints", "off", cpu),
    }
    # Seconds the runs spent in line: inside tracker calls (store opened, run created, metrics,
    # texts, artifacts, run ended) and saving checkpoints (capturing the state; the writes overlap
    # training), as fractions of the untracked run's wall time. The same costs as the overheads
    # above, without the noise of two wall times.
    in_line_fraction = {
        "mlflow": summary([t / off for t, off in zip(in_line["mlflow"]["tracker"], times["off"])]),
        "checkpoints": summary([t / off for t, off in zip(in_line["checkpoints"]["checkpoints"], times["off"])]),
        "default_vs_bare": summary(
            [
                (t + c) / off
                for t, c, off in zip(
                    in_line["mlflow_checkpoints"]["tracker"], in_line["mlflow_checkpoints"]["checkpoints"], times["off"]
                )
            ]
        ),
    }
    # The comparison, in wall time; the in-line shares above tell it without the noise.
    tracking_met = overheads["mlflow"]["median"] <= TARGETS["tracking"]
    return {
        "unit": "s",
        "config": " ".join(
            [config.arch, config.opt, config.data, f"epochs={config.epochs}", f"batch_size={config.batch_size}"]
            + ([f"train_size={config.train_size}"] if config.train_size else [])
        ),
        "repeats": plan.tracking_repeats,
        **{name: summary(values) for name, values in times.items()},
        "overhead": overheads,
        "cpu_seconds": {side: summary(values) for side, values in cpu.items()},
        "cpu_overhead": cpu_overheads,
        "in_line": {
            side: {part: summary(values) for part, values in parts.items() if any(values)}
            for side, parts in in_line.items()
        },
        "in_line_fraction": in_line_fraction,
        "target": f"<= {TARGETS['tracking']:.0%}",
        "met": tracking_met,
        "default_vs_bare_met": overheads["default_vs_bare"]["median"] <= TARGETS["tracking"],
        "in_line_met": {key: value["median"] <= TARGETS["tracking"] for key, value in in_line_fraction.items()},
    }


# -- 4. CLI start-up -------------------------------------------------------------------------------------


def initmem_command() -> list[str]:
    """The console script pip installed beside this Python (not a pyenv or conda shim, whose
    own start-up would be measured too); ``python -m initmem_cli`` if there is none."""
    script = Path(sys.executable).parent / "initmem"
    if script.exists():
        return [str(script)]
    found = shutil.which("initmem")
    return [found] if found else [sys.executable, "-m", "initmem_cli"]


IMPORT_CHECK = """import sys
from initmem_cli.app import app
try:
    app({args!r})
except SystemExit:
    pass
print(sorted(name for name in ("torch", "mlflow") if name in sys.modules))
"""


def bench_cli(plan: Plan) -> dict[str, Any]:
    initmem = initmem_command()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "initmem --help": [*initmem, "--help"],
        "initmem plugins": [*initmem, "plugins"],
        # Context, not targets: what the lazy imports save.
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
        "python -c 'import mlflow'": [sys.executable, "-c", "import mlflow"],
    }
    env = {**os.environ, "COLUMNS": "120"}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for index in range(plan.cli_warmup + plan.cli_repeats):
        for name, command in commands.items():
            began = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True, env=env)
            if index >= plan.cli_warmup:
                times[name].append(time.perf_counter() - began)
    imported = {}
    for args in (["--help"], ["plugins"]):
        out = subprocess.run(
            [sys.executable, "-c", IMPORT_CHECK.format(args=args)], check=True, capture_output=True, text=True, env=env
        ).stdout
        imported[f"initmem {' '.join(args)}"] = json.loads(out.strip().splitlines()[-1].replace("'", '"'))
    met = all(statistics.median(times[name]) < TARGETS["cli"] for name in ("initmem --help", "initmem plugins"))
    met = met and not any(imported.values())
    return {
        "unit": "s",
        "command": " ".join(initmem),
        "times": {name: summary(v) for name, v in times.items()},
        "heavy_modules_imported": imported,
        "target": f"< {TARGETS['cli']} s, torch not imported",
        "met": met,
    }


# -- the machine -----------------------------------------------------------------------------------------


def cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs from /proc/stat; ``None`` off Linux."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of CPU time the hypervisor gave to other machines: on a shared VM, the part of a
    wall-time difference that is neither side's doing."""
    if not before or not after or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def machine(args: argparse.Namespace) -> dict[str, Any]:
    info = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": memory_gib(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": args.device,
        "load_average_start": list(os.getloadavg()),
    }
    if args.device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name()
    return info


#: The modules whose code the benchmark measures; their digests say which version was measured.
MEASURED_CODE = (
    "initmem_core/training/loop.py",
    "initmem_core/training/setup.py",
    "initmem_core/training/loaders.py",
    "initmem_core/training/runner.py",
    "initmem_core/tracking/tracker.py",
    "initmem_core/training/divergence.py",
    "initmem_core/training/checkpoint_format.py",
    "initmem_core/training/checkpoint_store.py",
    "initmem_core/training/rng_state.py",
)


def code_version() -> dict[str, Any]:
    """The git commit and a digest of each measured module (the working tree may differ from it)."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    digests = {
        name: hashlib.sha256((root / name).read_bytes()).hexdigest()[:12]
        for name in MEASURED_CODE
        if (root / name).exists()
    }
    return {"commit": commit, "sha256": digests}


# -- output ------------------------------------------------------------------------------------------------


def _fmt(value: float, unit: str) -> str:
    if unit == "images/s":
        return f"{value:,.0f}"
    return f"{value:.3f}"


def _spread(stats: dict[str, Any], unit: str) -> str:
    return f"{_fmt(stats['median'], unit)} [{_fmt(stats['min'], unit)}-{_fmt(stats['max'], unit)}]"


def print_table(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="initmem benchmark: median [min-max] over repetitions")
    for column in ("comparison", "initmem side", "baseline side", "unit", "initmem vs baseline", "target", "met"):
        table.add_column(column)
    mark = {True: "[green]yes[/green]", False: "[red]NO[/red]"}
    for arch, r in results.get("train", {}).items():
        table.add_row(
            f"train {arch} (b={r['batch_size']}, {r['steps']} steps)",
            _spread(r["initmem"], r["unit"]),
            _spread(r["bare"], r["unit"]) + " bare",
            r["unit"],
            f"{r['ratio']['median']:.3f}x [{r['ratio']['min']:.3f}-{r['ratio']['max']:.3f}]",
            r["target"],
            mark[r["met"]],
        )
        if "control_ratio" in r:
            c = r["control_ratio"]
            table.add_row(
                f"  control: bare loop again ({arch})",
                _spread(r["bare_again"], r["unit"]) + " bare again",
                _spread(r["bare"], r["unit"]) + " bare",
                r["unit"],
                f"{c['median']:.3f}x [{c['min']:.3f}-{c['max']:.3f}]",
                "-",
                "-",
            )
    if "pipeline" in results:
        r = results["pipeline"]
        table.add_row(
            f"pipeline epoch ({r['images']:,} uint8, aug)",
            _spread(r["device"], r["unit"]) + " device",
            _spread(r["torchvision"], r["unit"]) + " torchvision",
            r["unit"],
            f"{r['speedup']['median']:.1f}x [{r['speedup']['min']:.1f}-{r['speedup']['max']:.1f}]",
            r["target"],
            mark[r["met"]],
        )
    if "tracking" in results:
        r = results["tracking"]

        def overhead(stats: dict[str, Any], cpu: dict[str, Any] | None = None) -> str:
            text = f"{stats['median']:+.1%} [{stats['min']:+.1%}, {stats['max']:+.1%}]"
            return text + (f"; cpu {cpu['median']:+.1%}" if cpu else "")

        o, c = r["overhead"], r["cpu_overhead"]
        table.add_row(
            f"digits run ({r['config']}): mlflow on vs off",
            _spread(r["mlflow"], "s") + " mlflow",
            _spread(r["off"], "s") + " off",
            "s",
            overhead(o["mlflow"], c["mlflow"]),
            r["target"],
            mark[o["mlflow"]["median"] <= TARGETS["tracking"]],
        )
        table.add_row(
            "  the same, both sides checkpointing every epoch",
            _spread(r["mlflow_checkpoints"], "s") + " mlflow + checkpoints",
            _spread(r["checkpoints"], "s") + " checkpoints",
            "s",
            overhead(o["mlflow_with_checkpoints"], c["mlflow_with_checkpoints"]),
            r["target"],
            mark[o["mlflow_with_checkpoints"]["median"] <= TARGETS["tracking"]],
        )
        fraction = r["in_line_fraction"]
        table.add_row(
            "  in line: time in tracker calls / untracked run",
            _spread(r["in_line"]["mlflow"]["tracker"], "s") + " in calls",
            _spread(r["off"], "s") + " off",
            "s",
            f"{fraction['mlflow']['median']:+.1%}",
            "-",
            "-",
        )
        table.add_row(
            "  checkpoints every epoch vs none (untracked)",
            _spread(r["checkpoints"], "s") + " checkpoints",
            _spread(r["off"], "s") + " off",
            "s",
            overhead(o["checkpoints"], c["checkpoints"]),
            "-",
            "-",
        )
        table.add_row(
            "  in line: time saving checkpoints / untracked run",
            _spread(r["in_line"]["checkpoints"]["checkpoints"], "s") + " saving",
            _spread(r["off"], "s") + " off",
            "s",
            f"{fraction['checkpoints']['median']:+.1%}",
            "-",
            "-",
        )
        table.add_row(
            "  default tracked run vs untracked, no checkpoints",
            _spread(r["mlflow_checkpoints"], "s") + " mlflow + checkpoints",
            _spread(r["off"], "s") + " off",
            "s",
            overhead(o["default_vs_bare"], c["default_vs_bare"]),
            r["target"],
            mark[r["default_vs_bare_met"]],
        )
        table.add_row(
            "  in line: both / untracked run",
            "",
            _spread(r["off"], "s") + " off",
            "s",
            f"{fraction['default_vs_bare']['median']:+.1%}",
            "-",
            "-",
        )
    if "cli" in results:
        r = results["cli"]
        base = r["times"]["python -c pass"]
        for name, stats in r["times"].items():
            if name == "python -c pass":
                continue
            is_target = name.startswith("initmem")
            imported = r["heavy_modules_imported"].get(name)
            label = f" (imports {imported or 'neither torch nor mlflow'})" if is_target else " (context)"
            table.add_row(
                name + label,
                _spread(stats, "s"),
                _spread(base, "s") + " python -c pass",
                "s",
                f"{stats['median'] - base['median']:+.3f} s",
                r["target"] if is_target else "-",
                mark[stats["median"] < TARGETS["cli"] and not imported] if is_target else "-",
            )
    Console(width=200).print(table)


# -- main ------------------------------------------------------------------------------------------------

SECTIONS = ("train", "pipeline", "tracking", "cli")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition: a smoke test (< 1 min)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default: cpu)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--repeats", type=int, help="measured repetitions per side (default: 5; --quick: 1)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads, both sides (0: torch's default)")
    parser.add_argument("--channels-last", action="store_true", help="channels-last memory format (train section)")
    parser.add_argument("--amp", choices=("off", "bf16"), default="off", help="bf16 autocast (train section)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (train section)")
    parser.add_argument("--train-steps", help="steps per repetition of the train section, e.g. resnet20=10,resnet9=4")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"a comma-separated subset of {SECTIONS}")
    parser.add_argument("--archs", default="resnet20,resnet9", help="architectures of the train section")
    parser.add_argument(
        "--control",
        action="store_true",
        help="train section: also time a second bare loop against the first (the noise floor)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    plan = QUICK if args.quick else Plan() if args.device == "cpu" else ACCELERATOR
    if args.repeats:
        plan = Plan(**{**plan.__dict__, "repeats": args.repeats, "tracking_repeats": args.repeats})
    if args.train_steps:
        steps = dict(item.split("=") for item in args.train_steps.split(","))
        plan = Plan(**{**plan.__dict__, "train_steps": {**plan.train_steps, **{k: int(v) for k, v in steps.items()}}})
    if args.threads:
        torch.set_num_threads(args.threads)
    args.threads = torch.get_num_threads()  # both sides, and every run, use exactly this many
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"--sections: unknown {', '.join(sorted(unknown))}; valid: {', '.join(SECTIONS)}")

    results: dict[str, Any] = {
        "machine": machine(args),
        "code": code_version(),
        "plan": {
            **plan.__dict__,
            "channels_last": args.channels_last,
            "amp": args.amp,
            "compile": args.compile,
            "quick": args.quick,
        },
        "section_seconds": {},
    }
    began = time.perf_counter()

    def save() -> str:
        results["machine"]["load_average_end"] = list(os.getloadavg())
        results["seconds"] = time.perf_counter() - began
        text = json.dumps(results, indent=2, default=str)
        if args.json:
            args.json.write_text(text)
        return text

    with tempfile.TemporaryDirectory(prefix="initmem-bench-") as folder:
        for section in sections:
            print(f"[{time.perf_counter() - began:6.1f} s] {section} ...", file=sys.stderr, flush=True)
            section_began, ticks = time.perf_counter(), cpu_ticks()
            if section == "train":
                results["train"] = {
                    arch: bench_train(arch, plan, args) for arch in args.archs.split(",") if arch.strip()
                }
            elif section == "pipeline":
                results["pipeline"] = bench_pipeline(plan, args)
            elif section == "tracking":
                results["tracking"] = bench_tracking(plan, args, Path(folder))
            elif section == "cli":
                results["cli"] = bench_cli(plan)
            results["section_seconds"][section] = time.perf_counter() - section_began
            results["machine"][f"load_average_after_{section}"] = list(os.getloadavg())
            results["machine"][f"cpu_steal_during_{section}"] = steal_share(ticks, cpu_ticks())
            save()
    text = save()
    print_table(results)
    steal = {section: results["machine"].get(f"cpu_steal_during_{section}") for section in sections}
    if any(share is not None for share in steal.values()):
        print(
            "CPU steal (time the hypervisor gave other machines) during: "
            + ", ".join(f"{section} {share:.0%}" for section, share in steal.items() if share is not None)
        )
    print(text)
    return results


if __name__ == "__main__":
    main()
