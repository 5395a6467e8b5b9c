"""One prepared GPU check: correctness on CUDA and speed against a bare loop, in at most 8 minutes.

    python -m benchmarks.gpu_check                  # on a CUDA machine: every step, then the docs section
    python -m benchmarks.gpu_check --dry-run        # every step at toy size on the CPU (well under 2 min)
    python -m benchmarks.gpu_check --dry-run --docs /tmp/PERFORMANCE.md --json /tmp/gpu.json

Six steps, each reported passed or failed (the script exits 1 if any failed):

(a) ``tests``: the suite's tests selected by ``pytest -k "cuda or gpu"``: the ``gpu``-marked ones,
    which need a real CUDA GPU (``-k`` matches marker names too), and the CPU fakes of
    ``torch.cuda`` named for CUDA or GPUs. On a GPU machine no ``gpu``-marked test may skip. The
    dry run runs the ``gpu``-marked tests (they skip) from the files that mark any, and leaves the
    CPU ones to the suite.
(b) ``determinism``: one small cell run twice with ``--deterministic``, each in its own process:
    every metric of every epoch and every final weight must be bit-identical. The first run is
    also (d)'s uninterrupted run.
(c) ``divergence``: an optimizer plugin writes a NaN into the first convolution after step 6;
    the divergence guard must stop the run at exactly step 7 (``Diverged.step``, the run's
    ``diverged_step`` tag), in epoch 2.
(d) ``resume``: ``initmem run --no-tracking --checkpoint-dir`` is SIGKILLed after its epoch-2
    checkpoint and continued in another process by ``initmem_core.run(resume=True)`` (what
    ``--resume`` runs) with an in-memory tracker: every metric it logs and its ``final_weights.pt``
    must equal the uninterrupted run of (b), and the weights must load onto the CPU without
    ``map_location``. (The MLflow side of a resume does not depend on the device; tests/test_resume.py
    covers it.)
(e) ``speed``: ms per training step and evaluation seconds per epoch of ResNet-20 and ResNet-9 on
    CIFAR-format data (synthetic uint8 images written in the ``cifar-10-batches-py`` on-disk format
    and read by the built-in ``cifar10`` plugin with ``--data-dir``), in fp32, TF32 and bf16, each
    with and without channels-last and ``--compile`` (modes default and reduce-overhead), against
    ``bench.BareLoop``: an airbench-style bare loop at the same precision and layout (the data one
    normalised tensor on the device, the same model, optimizer and batch, no tracking, no eval).
    Configurations run in order of importance until the step's share of the time budget is spent;
    the rest are listed as not measured.
(f) ``concurrency``: total training images/s of 1, 2, 4 and 8 ResNet-20 cells (separate
    processes, tracking off, evaluation every epoch as a cell does) sharing the GPU, all timed over
    the same wall-clock window.

Then the goals of issue 28 are read off the figures: a ResNet-9 epoch (training plus its
evaluation) within 1.5x of the bare loop's epoch at the same precision, and 4 concurrent ResNet-20
cells at >= 2.5x one cell's images/s. The results go into the GPU section of docs/PERFORMANCE.md
(between its ``gpu_check`` markers, so a rerun replaces them) and, with ``--json``, into a file.

Timing on a GPU: every clock read that measures device work is preceded by a
``torch.cuda.synchronize()`` (``bench.synchronizer``), since kernels run asynchronously.

The synthetic CIFAR files cannot match the official md5 sums that torchvision checks, so in this
script's processes (and only there) torchvision's ``check_integrity`` is reduced to "the file
exists", as tests/test_datasets.py does.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import functools
import itertools
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initmem_core import hookimpl

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "PERFORMANCE.md"
BEGIN = "<!-- gpu_check: begin (written by benchmarks/gpu_check.py; rerun it rather than editing) -->"
END = "<!-- gpu_check: end -->"

#: The goals of issue 28, read off the figures.
EPOCH_RATIO_GOAL = 1.5  # a ResNet-9 epoch of initmem (with its evaluation) / the bare loop's epoch
CONCURRENCY_GOAL = 2.5  # total images/s of 4 concurrent ResNet-20 cells / one cell's
STEPS = ("tests", "determinism", "divergence", "resume", "speed", "concurrency")
LETTER = dict(zip(STEPS, "abcdef"))


@dataclass(frozen=True)
class Plan:
    """Every size of the check in one place (``--dry-run`` shrinks them all)."""

    device: str
    per_batch: int  # images per CIFAR training batch file (5 files); the test file holds test_images
    test_images: int
    threads: int  # torch CPU threads of every run (0: torch's default)
    cell_batch: int  # the small cells of (b), (c), (d)
    cell_train: int
    cell_eval_size: int  # at most this many validation and test images in those cells (0: all)
    resume_epochs: int
    speed_batch: int
    speed_steps: int  # training steps per timed epoch in (e)
    speed_epochs: int  # epoch 1 warms up (compilation, cuDNN's algorithm search); the rest are timed
    concurrency: tuple[int, ...]
    window_s: float  # (f): the common wall-clock window every cell is timed over
    concurrency_train: int  # training images of each (f) cell (0: all 45,000)
    tests_timeout_s: int
    budget_s: float  # the whole check's wall time; (e) gets what (a)-(d) and (f) leave
    speed_reserve_s: float  # kept for (f) when (e) starts


FULL = Plan(
    device="cuda",
    per_batch=10_000,
    test_images=10_000,
    threads=0,
    cell_batch=128,
    cell_train=2048,
    cell_eval_size=2000,
    resume_epochs=8,
    speed_batch=128,
    speed_steps=50,
    speed_epochs=3,
    concurrency=(1, 2, 4, 8),
    window_s=10.0,
    concurrency_train=0,
    tests_timeout_s=240,
    budget_s=465.0,
    speed_reserve_s=150.0,
)
DRY = Plan(
    device="cpu",
    per_batch=20,
    test_images=20,
    threads=1,
    cell_batch=16,
    cell_train=64,
    cell_eval_size=0,
    resume_epochs=4,
    speed_batch=16,
    speed_steps=2,
    speed_epochs=2,
    concurrency=(1, 2),
    window_s=1.0,
    concurrency_train=64,
    tests_timeout_s=600,
    budget_s=600.0,
    speed_reserve_s=60.0,
)

# The cells of (b), (c) and (d): SGD with momentum and augmentation, so optimizer state and every RNG matter.
POISON_AFTER_STEP = 6  # (c): NaN written into a weight after this step; the next step's loss is NaN
POISON_BATCH, POISON_TRAIN = 16, 64  # 4 steps an epoch: step 7 is the 3rd step of epoch 2


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- CIFAR-format data ------------------------------------------------------------------------------


def write_cifar(root: Path, plan: Plan) -> Path:
    """Synthetic uint8 images in the exact ``cifar-10-batches-py`` layout (Python 2 pickles), with
    the writer the dataset tests use."""
    from tests.test_datasets import write_cifar10

    write_cifar10(root, per_batch=plan.per_batch, n_test=plan.test_images)
    return root


def skip_cifar_md5() -> None:
    """The synthetic files cannot match the official md5 sums torchvision checks: "exists" instead."""
    import torchvision.datasets.cifar as tv_cifar

    tv_cifar.check_integrity = lambda path, md5=None: Path(path).is_file()


def split_sizes(plan: Plan) -> dict[str, int]:
    """The cifar10 plugin's split of the files written: 10% of training for validation."""
    train_all = 5 * plan.per_batch
    val = int(round(train_all * 0.1))
    return {"train": train_all - val, "val": val, "test": plan.test_images}


# -- knobs ------------------------------------------------------------------------------------------


def config_fields() -> set[str]:
    from initmem_core.config import FIELDS

    return set(FIELDS)


def missing_knobs(knobs: dict[str, Any]) -> list[str]:
    """Knobs this version of initmem does not have (the check then says so instead of failing)."""
    fields = config_fields()
    return [key for key in knobs if key not in fields]


def cli_args(knobs: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for key, value in knobs.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args += [flag] if value else []
        else:
            args += [flag, str(value)]
    return args


def cell_knobs(plan: Plan, data_dir: Path, **changes: Any) -> dict[str, Any]:
    knobs = dict(
        arch="resnet20",
        data="cifar10",
        data_dir=str(data_dir),
        batch_size=plan.cell_batch,
        train_size=plan.cell_train,
        eval_size=plan.cell_eval_size,
        epochs=2,
        lr=0.05,
        momentum=0.9,
        augment="on",
        seed=3,
        device=plan.device,
        threads=plan.threads,
        eval_batch_size=1024,
    )
    knobs.update(changes)
    return knobs


# -- worker processes ---------------------------------------------------------------------------------


class Poison:
    """``gpu-check-nan-sgd``: SGD that writes a NaN into the first convolution after step ``after``."""

    def __init__(self, after: int):
        self.after = after

    @hookimpl
    def initmem_register_optimizers(self, register):
        import torch

        after = self.after

        def build(model, config):
            class Poisoning(torch.optim.SGD):
                steps = 0

                def step(self, closure=None):
                    loss = super().step(closure)
                    Poisoning.steps += 1
                    if Poisoning.steps == after:
                        with torch.no_grad():
                            next(p for p in model.parameters() if p.ndim == 4).view(-1)[0] = math.nan
                    return loss

            return Poisoning(model.parameters(), lr=config.lr or 0.05, momentum=config.momentum)

        register("gpu-check-nan-sgd", build)


def worker_run(spec: dict[str, Any]) -> None:
    """One ``initmem_core.run`` in this fresh process, tracked in memory; saves its history, its
    final weights, the metrics it logged, the ``final_weights.pt`` it logged (as bytes) and where it
    diverged, if it did. ``resume``: continue this config's run from ``checkpoint_dir``."""
    import torch

    import initmem_core
    from initmem_core import Diverged
    from initmem_core.plugin_system.loader import load_registry, set_registry
    from initmem_core.tracking.tracker import MemoryTracker

    class KeepingTracker(MemoryTracker):
        """Keeps the bytes of each file logged (the runner deletes its temporary copy)."""

        def log_artifact(self, local_path, artifact_path=None):
            super().log_artifact(local_path, artifact_path)
            blobs[Path(local_path).name] = Path(local_path).read_bytes()

    if spec.get("poison_after"):
        set_registry(load_registry(extra_plugins=[("gpu-check-poison", Poison(spec["poison_after"]))]))
    blobs: dict[str, bytes] = {}
    tracker = KeepingTracker()
    out: dict[str, Any] = {"diverged": None}
    try:
        result = initmem_core.run(tracking=False, tracker=tracker, resume=bool(spec.get("resume")), **spec["knobs"])
        out["history"] = result.history
        out["weights"] = {key: value.detach().cpu() for key, value in result.model.state_dict().items()}
        out["logged"] = [list(row) for row in tracker.metrics]
        out["final_weights"] = blobs.get("final_weights.pt", b"")
    except Diverged as diverged:
        out["diverged"] = [diverged.epoch, diverged.step, str(diverged)]
    torch.save(out, spec["out"])


class PhaseTimer:
    """A ``Progress`` for ``train()``: each epoch's training span (from the end of the previous
    evaluation to the epoch's last step) and its evaluation span (from the last step to the end of
    its evaluation), the device synchronised before each clock read."""

    def __init__(self, sync: Callable[[], None]):
        self.sync = sync
        self.steps_per_epoch = 0
        self.step = 0
        self.began = 0.0
        self.last_step: float | None = None
        self.train_s: list[float] = []
        self.eval_s: list[float] = []

    def start(self, epochs: int, steps_per_epoch: int) -> None:
        self.steps_per_epoch = steps_per_epoch

    def advance(self, steps: int) -> None:
        self.step += steps
        if self.step >= self.steps_per_epoch:
            self.sync()
            self.last_step = time.perf_counter()
            self.train_s.append(self.last_step - self.began)

    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None:
        self.sync()
        now = time.perf_counter()
        if epoch >= 1 and self.last_step is not None:
            self.eval_s.append(now - self.last_step)
        self.step, self.began = 0, now


def speed_configs(dry: bool) -> list[dict[str, Any]]:
    """(e)'s configurations, most important first: every eager one, then the compiled ones that
    the fastest settings need, then the rest."""
    precisions = {
        "fp32": dict(amp="off", tf32="off"),
        "tf32": dict(amp="off", tf32="on"),
        "bf16": dict(amp="bf16", tf32="off"),
    }
    if dry:
        chosen = [
            ("resnet20", "fp32", False, ""),
            ("resnet20", "bf16", True, ""),
            ("resnet20", "tf32", False, ""),
            ("resnet9", "fp32", False, ""),
        ]
    else:
        everything = list(
            itertools.product(("resnet9", "resnet20"), precisions, (False, True), ("", "default", "reduce-overhead"))
        )

        def tier(item: tuple[str, str, bool, str]) -> tuple[int, int]:
            arch, precision, channels_last, mode = item
            if not mode:
                rank = 0
            elif precision == "bf16" and channels_last:
                rank = 1 if mode == "default" else 2
            elif channels_last and mode == "default":
                rank = 3
            else:
                rank = 4
            return rank, ("resnet9", "resnet20").index(arch)

        chosen = sorted(everything, key=tier)  # stable: within a tier, the product's order
    return [
        {
            "arch": arch,
            "precision": precision,
            "channels_last": channels_last,
            "compile_mode": mode,
            **precisions[precision],
        }
        for arch, precision, channels_last, mode in chosen
    ]


def speed_knobs(config: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    knobs = dict(
        arch=config["arch"],
        data="cifar10",
        data_dir=spec["data_dir"],
        batch_size=spec["batch"],
        train_size=spec["batch"] * spec["steps"],
        epochs=spec["epochs"],
        lr=0.05,
        augment="on",
        device=spec["device"],
        threads=spec["threads"],
        eval_batch_size=1024,
        checkpoint_every=0,
        amp=config["amp"],
        channels_last=config["channels_last"],
        compile=bool(config["compile_mode"]),
        tf32=config["tf32"],
    )  # always explicit: PyTorch's own default runs cuDNN convolutions in TF32
    if config["compile_mode"]:
        knobs["compile_mode"] = config["compile_mode"]
    return knobs


def measure_speed(config: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    import initmem_core
    from benchmarks.bench import BareLoop, synchronizer
    from initmem_core.config import RunConfig
    from initmem_core.training import setup as setup_module

    knobs = speed_knobs(config, spec)
    absent = missing_knobs(knobs)
    if absent:
        return {**config, "status": f"not measured: this initmem has no {', '.join(absent)} knob"}
    device = torch.device(spec["device"])
    sync = synchronizer(device)
    if config["compile_mode"]:
        torch._dynamo.reset()  # each configuration compiles as a fresh cell process would
    timer = PhaseTimer(sync)
    began = time.perf_counter()
    initmem_core.run(tracking=False, progress=timer, **knobs)
    run_seconds = time.perf_counter() - began
    steps = spec["steps"]
    timed_train, timed_eval = timer.train_s[1:], timer.eval_s[1:]  # epoch 1 warms up
    step_ms = statistics.median(timed_train) / steps * 1e3
    eval_s = statistics.median(timed_eval)
    sizes = spec["sizes"]
    evaluated = steps * spec["batch"] + sizes["val"] + sizes["test"]  # clean train subset, val, test
    full_eval = sizes["train"] + sizes["val"] + sizes["test"]

    # The bare loop at the same precision, layout and compilation.
    bare = BareLoop(RunConfig(**knobs))
    use_precision = getattr(setup_module, "use_precision", None)
    if use_precision is not None:
        use_precision(config["tf32"])
    if config["compile_mode"]:
        bare.forward = torch.compile(bare.model, mode=config["compile_mode"])
    bare_epochs = [bare.epoch() for _ in range(spec["epochs"])]
    bare_ms = statistics.median(bare_epochs[1:]) / steps * 1e3
    full_steps = sizes["train"] / spec["batch"]  # a whole epoch's steps (the last one partial)
    epoch_s = full_steps * step_ms / 1e3 + eval_s * full_eval / evaluated
    bare_epoch_s = full_steps * bare_ms / 1e3
    del bare
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        **config,
        "status": "measured",
        "step_ms": step_ms,
        "bare_step_ms": bare_ms,
        "step_ratio": step_ms / bare_ms,
        "eval_s_measured": eval_s,
        "eval_images_measured": evaluated,
        "eval_s_per_epoch": eval_s * full_eval / evaluated,
        "epoch_s": epoch_s,
        "bare_epoch_s": bare_epoch_s,
        "epoch_ratio": epoch_s / bare_epoch_s,
        "first_epoch_extra_s": timer.train_s[0] - statistics.median(timed_train),
        "bare_first_epoch_extra_s": bare_epochs[0] - statistics.median(bare_epochs[1:]),
        "train_samples_s": timer.train_s,
        "eval_samples_s": timer.eval_s,
        "bare_samples_s": bare_epochs,
        "run_seconds": run_seconds,
    }


def worker_speed(spec: dict[str, Any]) -> None:
    """(e) in one process: each configuration in turn, the results file rewritten after each, until
    the deadline; a configuration whose estimated cost does not fit is left out."""
    import torch

    # Many compiled configurations in one process: without this, TorchDynamo gives up recompiling
    # after 8 variants of the model's forward and silently runs the rest eagerly.
    torch._dynamo.config.recompile_limit = 256
    torch._dynamo.config.accumulated_recompile_limit = 4096
    # The same files for every configuration: read them once (saves a second or two per run).
    from initmem_plugins.datasets import cifar

    cifar._read = functools.lru_cache(maxsize=None)(cifar._read)
    deadline = spec["deadline"]
    results: list[dict[str, Any]] = []
    for config in spec["configs"]:
        estimate = spec["estimate_compiled_s"] if config["compile_mode"] else spec["estimate_eager_s"]
        if time.time() + estimate > deadline:
            results.append({**config, "status": "not measured: the time budget was spent"})
        else:
            try:
                results.append(measure_speed(config, spec))
            except Exception as error:  # reported in the table; the other configurations still run
                results.append(
                    {
                        **config,
                        "status": f"failed: {type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}",
                    }
                )
        Path(spec["out"]).write_text(json.dumps(results, indent=1))


class WindowEnd(Exception):
    """Raised from inside the training loop when the timed window is over."""


class Window:
    """A ``Progress`` for one cell of (f): after its first epoch (warm) it says it is ready, waits
    for the common start time, counts its training steps until its window closes and writes them
    out, then goes on training, uncounted, until every cell's window has closed (so that no cell
    is timed while others have stopped), and ends."""

    def __init__(self, spec: dict[str, Any], sync: Callable[[], None]):
        self.spec, self.sync = spec, sync
        self.phase = "warm"
        self.steps = 0
        self.began = 0.0
        self.wall_began = 0.0

    def start(self, epochs: int, steps_per_epoch: int) -> None:
        pass

    def _check(self) -> None:
        if self.phase == "timing" and time.perf_counter() >= self.began + self.spec["window_s"]:
            self.sync()
            ended, wall_ended = time.perf_counter(), time.time()
            images = self.steps * self.spec["knobs"]["batch_size"]
            out = Path(self.spec["out"])
            out.with_suffix(".tmp").write_text(
                json.dumps(
                    {
                        "images": images,
                        "seconds": ended - self.began,
                        "images_per_s": images / (ended - self.began),
                        "wall": [self.wall_began, wall_ended],
                    }
                )
            )
            out.with_suffix(".tmp").rename(out)
            self.phase = "draining"
        elif self.phase == "draining" and Path(self.spec["stop"]).exists():
            raise WindowEnd

    def advance(self, steps: int) -> None:
        if self.phase == "timing":
            self.steps += steps
        self._check()

    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None:
        if epoch >= 1 and self.phase == "warm":
            self.sync()
            Path(self.spec["ready"]).write_text(str(os.getpid()))
            go = Path(self.spec["go"])
            give_up = time.time() + self.spec["wait_s"]
            while not go.exists():
                if time.time() > give_up:
                    raise TimeoutError("no start signal")
                time.sleep(0.005)
            start_at = float(go.read_text())
            while time.time() < start_at:
                time.sleep(0.001)
            self.sync()
            self.began, self.wall_began = time.perf_counter(), time.time()
            self.phase = "timing"
        else:
            self._check()


def worker_throughput(spec: dict[str, Any]) -> None:
    import torch

    import initmem_core
    from benchmarks.bench import synchronizer

    window = Window(spec, synchronizer(torch.device(spec["knobs"]["device"])))
    try:
        initmem_core.run(tracking=False, progress=window, **spec["knobs"])
        raise RuntimeError("the cell finished before the window closed: give it more epochs")
    except WindowEnd:
        pass


WORKERS = {"run": worker_run, "speed": worker_speed, "throughput": worker_throughput}


# -- the steps ----------------------------------------------------------------------------------------


class Context:
    def __init__(self, plan: Plan, folder: Path, data_dir: Path, dry: bool, deadline: float):
        self.plan, self.folder, self.data_dir, self.dry, self.deadline = plan, folder, data_dir, dry, deadline
        self.counter = itertools.count()
        self.lock = threading.Lock()
        self._reference_lock = threading.Lock()
        self._reference: dict[str, Any] | None = None

    def reference(self) -> dict[str, Any]:
        """The uninterrupted cell (b) reruns and (d) resumes to: run once, by whichever asks first."""
        with self._reference_lock:
            if self._reference is None:
                self._reference = run_cell(self, reference_knobs(self))
            return self._reference

    def path(self, stem: str) -> Path:
        with self.lock:
            return self.folder / f"{stem}-{next(self.counter)}"

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))  # for its imports
        env.pop("INITMEM_LOAD_PLUGINS", None)
        return env

    def worker(self, kind: str, spec: dict[str, Any], timeout: float) -> subprocess.CompletedProcess:
        spec_path = self.path(f"{kind}-spec").with_suffix(".json")
        spec_path.write_text(json.dumps(spec))
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--spec", str(spec_path)]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=self.environment(), cwd=self.folder
        )

    def start_initmem(self, args: list[str], **popen: Any) -> subprocess.Popen:
        """``initmem ARGS`` through this script (so that the synthetic CIFAR files pass the md5 check)."""
        command = [sys.executable, str(Path(__file__).resolve()), "--as-initmem", *args]
        return subprocess.Popen(command, env=self.environment(), cwd=self.folder, **popen)


def last_lines(text: str, n: int = 6) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-n:])


def reference_knobs(ctx: Context) -> dict[str, Any]:
    """The uninterrupted cell of (b) and (d)."""
    return cell_knobs(ctx.plan, ctx.data_dir, epochs=ctx.plan.resume_epochs, deterministic=True)


def run_cell(ctx: Context, knobs: dict[str, Any], timeout: float = 300, **extra: Any) -> dict[str, Any]:
    import torch

    out = ctx.path("cell").with_suffix(".pt")
    done = ctx.worker("run", {"knobs": knobs, "out": str(out), **extra}, timeout)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"the cell's process exited {done.returncode}: {last_lines(done.stderr)}")
    return torch.load(out, weights_only=True)


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def history_differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[str]:
    if len(a) != len(b):
        return [f"{len(a)} rows vs {len(b)}"]
    return [
        f"epoch {row.get('epoch')} {key}: {row[key]!r} vs {other.get(key)!r}"
        for row, other in zip(a, b)
        for key in row
        if not same_value(row[key], other.get(key))
    ]


def weight_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    import torch

    if a.keys() != b.keys():
        return ["different parameter names"]
    return [key for key in a if not torch.equal(a[key], b[key])]


PYTEST_PLUGIN = """\
import json
import os

import pytest

SELECTED, ROWS = [], []


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected
def pytest_collection_modifyitems(config, items):
    SELECTED.extend({"test": item.nodeid, "gpu": item.get_closest_marker("gpu") is not None} for item in items)
    if os.environ.get("GPU_CHECK_ONLY_GPU_MARKED"):
        kept = [item for item in items if item.get_closest_marker("gpu") is not None]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        ROWS.append({"test": report.nodeid, "outcome": report.outcome})


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["GPU_CHECK_OUTCOMES"], "w") as handle:
        json.dump({"selected": SELECTED, "outcomes": ROWS}, handle)
"""


def step_tests(ctx: Context) -> dict[str, Any]:
    """(a): ``pytest -k "(cuda or gpu) and not gpu_check"`` (``-k`` matches marker names too, so the
    ``gpu``-marked tests are in it), each test's outcome recorded by a small pytest plugin. The dry
    run runs only the ``gpu``-marked tests (which skip without CUDA), collected from the files that
    mark any: the suite runs the CPU fakes anyway, and on a small machine collecting and running
    them would take most of the dry run."""
    plugin_dir = ctx.path("pytest-plugin")
    plugin_dir.mkdir()
    report = plugin_dir / "outcomes.json"
    (plugin_dir / "gpu_check_outcomes.py").write_text(PYTEST_PLUGIN)
    selection = "(cuda or gpu) and not gpu_check"
    files: list[str] = ["tests"]
    env = ctx.environment()
    env["PYTHONPATH"] = os.pathsep.join([str(plugin_dir), env["PYTHONPATH"]])
    env["GPU_CHECK_OUTCOMES"] = str(report)
    if ctx.dry:
        # Only the files that mark tests gpu (collecting the whole suite would take most of a dry
        # run on a small machine), and this check's own tests, which the selection must leave out.
        files = sorted(
            str(p.relative_to(ROOT))
            for p in (ROOT / "tests").glob("test_*.py")
            if p.name == "test_gpu_check.py" or "mark.gpu" in p.read_text()
        )
        env["GPU_CHECK_ONLY_GPU_MARKED"] = "1"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "gpu_check_outcomes",
        "-p",
        "no:cacheprovider",
        "-k",
        selection,
        *files,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=ctx.plan.tests_timeout_s, env=env, cwd=ROOT)
    found = json.loads(report.read_text()) if report.exists() else {"selected": [], "outcomes": []}
    calls: dict[str, str] = {}
    for row in found["outcomes"]:  # one outcome per test: a failed setup or teardown counts as failed
        if row["outcome"] == "failed" or row["test"] not in calls:
            calls[row["test"]] = row["outcome"]
    outcome = {kind: sorted(t for t, o in calls.items() if o == kind) for kind in ("passed", "failed", "skipped")}
    gpu_marked = sorted(row["test"] for row in found["selected"] if row["gpu"])
    fakes = [row["test"] for row in found["selected"] if not row["gpu"]]
    gpu_skipped = sorted(set(gpu_marked) & set(outcome["skipped"]))
    cuda = ctx.plan.device.startswith("cuda")
    problems = []
    if done.returncode != 0 or outcome["failed"]:
        problems.append(
            f"pytest exited {done.returncode}; failed: {', '.join(outcome['failed']) or last_lines(done.stdout, 3)}"
        )
    if not gpu_marked:
        problems.append("no gpu-marked test was selected")
    if not ctx.dry and not outcome["passed"]:
        problems.append("no test passed")
    if cuda and gpu_skipped:
        problems.append(f"gpu-marked tests skipped on a GPU machine: {', '.join(gpu_skipped)}")
    ran_gpu = len(gpu_marked) - len(gpu_skipped)
    if ctx.dry:
        detail = (
            f'`pytest -k "{selection}"` over the files that mark tests gpu: {len(gpu_marked)} gpu-marked '
            f"tests ({ran_gpu} ran, {len(gpu_skipped)} skipped: no CUDA); the CPU tests of the CUDA logic are "
            f"left to the suite in a dry run"
        )
    else:
        detail = (
            f'`pytest -k "{selection}"`: {len(outcome["passed"])} passed, {len(outcome["skipped"])} skipped, '
            f"{len(outcome['failed'])} failed; of them {len(gpu_marked)} gpu-marked ({ran_gpu} ran) and "
            f"{len(fakes)} CPU tests of the CUDA logic"
        )
    return {
        "passed": not problems,
        "detail": detail,
        "problems": problems,
        "outcomes": outcome,
        "gpu_marked": gpu_marked,
        "cpu_fakes": fakes,
    }


def step_determinism(ctx: Context) -> dict[str, Any]:
    knobs = reference_knobs(ctx)
    first, second = ctx.reference(), run_cell(ctx, knobs)
    metrics = history_differences(first["history"], second["history"])
    weights = weight_differences(first["weights"], second["weights"])
    values = sum(len(row) for row in first["history"])
    detail = (
        f"resnet20, {knobs['epochs']} epochs of {knobs['train_size']} images, batch {knobs['batch_size']}, "
        f"momentum 0.9, augmentation, `--deterministic`, two processes: {values} logged values and "
        f"{len(first['weights'])} weight tensors compared"
    )
    problems = ([f"metrics differ: {'; '.join(metrics[:3])}"] if metrics else []) + (
        [f"weights differ: {', '.join(weights[:5])}"] if weights else []
    )
    return {
        "passed": not problems,
        "detail": detail + (": bit-identical" if not problems else ""),
        "problems": problems,
    }


def step_divergence(ctx: Context) -> dict[str, Any]:
    knobs = cell_knobs(
        ctx.plan,
        ctx.data_dir,
        opt="gpu-check-nan-sgd",
        epochs=3,
        batch_size=POISON_BATCH,
        train_size=POISON_TRAIN,
        momentum=0.0,
    )
    result = run_cell(ctx, knobs, poison_after=POISON_AFTER_STEP)
    expected = [2, POISON_AFTER_STEP + 1]
    got = result["diverged"]
    problems = []
    if got is None:
        problems.append("the run did not diverge")
    elif got[:2] != expected:
        problems.append(
            f"diverged in epoch {got[0]} at step {got[1]}, expected epoch 2 at step {expected[1]}: {got[2]}"
        )
    detail = f"NaN written into the first conv after step {POISON_AFTER_STEP} (4 steps an epoch): " + (
        f"stopped in epoch {got[0]} at step {got[1]}" if got else "no stop"
    )
    return {"passed": not problems, "detail": detail, "problems": problems}


def step_resume(ctx: Context) -> dict[str, Any]:
    import io

    import torch

    knobs = reference_knobs(ctx)
    epochs = knobs["epochs"]
    folder = ctx.path("resume")
    checkpoints = folder / "checkpoints"
    args = ["run", *cli_args(knobs), "--no-tracking", "--checkpoint-dir", str(checkpoints), "--checkpoint-every", "1"]
    killed = ctx.start_initmem(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    give_up = time.monotonic() + 300
    while not list(checkpoints.glob("*/ckpt-e000002-*.pt")):
        if killed.poll() is not None:
            raise RuntimeError(f"the run ended before its epoch-2 checkpoint: {last_lines(killed.stderr.read())}")
        if time.monotonic() > give_up:
            killed.kill()
            raise RuntimeError("no epoch-2 checkpoint within 300 s")
        time.sleep(0.002)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    killed.stderr.close()
    problems = []
    if list(checkpoints.glob(f"*/ckpt-e{epochs:06d}-*.pt")):
        problems.append("killed too late: the run had finished")
    resumed = run_cell(ctx, {**knobs, "checkpoint_dir": str(checkpoints), "checkpoint_every": 1}, resume=True)
    reference = ctx.reference()
    differing = history_differences(reference["history"], resumed["history"])
    if differing:
        problems.append(f"the history differs from the uninterrupted run's: {'; '.join(differing[:3])}")
    logged: dict[str, list[tuple[int, float]]] = {}
    for step, key, value in resumed["logged"]:
        logged.setdefault(key, []).append((int(step), value))
    compared = 0
    for key in sorted({k for row in reference["history"] for k in row} - {"epoch"}):
        expected = [(row["epoch"], row[key]) for row in reference["history"] if key in row]
        compared += len(expected)
        got = logged.get(key, [])  # every step once: the resume logs what the killed process could not
        if len(got) != len(expected) or not all(
            s == t and same_value(float(v), float(w)) for (s, v), (t, w) in zip(expected, sorted(got))
        ):
            problems.append(f"the logged {key} differs from the uninterrupted run's")
    if not resumed["final_weights"]:
        problems.append("no final_weights.pt was logged")
    else:
        weights = torch.load(io.BytesIO(resumed["final_weights"]), weights_only=True)  # no map_location
        off_cpu = [key for key, value in weights.items() if value.device.type != "cpu"]
        if off_cpu:
            problems.append(f"final_weights.pt holds tensors off the CPU: {', '.join(off_cpu[:3])}")
        differing = weight_differences(reference["weights"], {k: v.cpu() for k, v in weights.items()})
        if differing:
            problems.append(f"final weights differ from the uninterrupted run's: {', '.join(differing[:5])}")
    detail = (
        f"`initmem run` ({epochs} epochs, `--deterministic`) SIGKILLed after its epoch-2 checkpoint, then "
        f"resumed (`initmem_core.run(resume=True)`, as `--resume` does): {compared} logged values and the "
        f"final weights compared with the uninterrupted run of (b)"
        + (": identical, final_weights.pt on the CPU" if not problems else "")
    )
    return {"passed": not problems, "detail": detail, "problems": problems}


def step_speed(ctx: Context, budget_s: float) -> dict[str, Any]:
    plan = ctx.plan
    out = ctx.path("speed").with_suffix(".json")
    spec = {
        "configs": speed_configs(ctx.dry),
        "data_dir": str(ctx.data_dir),
        "device": plan.device,
        "threads": plan.threads,
        "batch": plan.speed_batch,
        "steps": plan.speed_steps,
        "epochs": plan.speed_epochs,
        "sizes": split_sizes(plan),
        "deadline": time.time() + budget_s,
        "out": str(out),
        "estimate_eager_s": 4.0 if ctx.dry else 8.0,
        "estimate_compiled_s": 75.0,
    }
    try:
        done = ctx.worker("speed", spec, timeout=budget_s + 60)
        failure = (
            "" if done.returncode == 0 else f"the timing process exited {done.returncode}: {last_lines(done.stderr)}"
        )
    except subprocess.TimeoutExpired:
        failure = "the timing process outlasted its budget and was stopped"
    rows = json.loads(out.read_text()) if out.exists() else []
    measured = [row for row in rows if row["status"] == "measured"]
    failed = [row for row in rows if row["status"].startswith("failed")]
    problems = [failure] if failure else []
    problems += [f"{label(row)}: {row['status']}" for row in failed]
    eager_fp32 = [row for row in measured if row["precision"] == "fp32" and not row["compile_mode"]]
    if len({row["arch"] for row in eager_fp32}) < 2:
        problems.append("the eager fp32 runs of both architectures were not measured")
    if any(not (row["step_ms"] > 0 and row["bare_step_ms"] > 0 and row["eval_s_per_epoch"] > 0) for row in measured):
        problems.append("a timing is not positive")
    detail = (
        f"{len(measured)} of {len(spec['configs'])} configurations measured"
        f"{f', {len(failed)} failed' if failed else ''} (batch {plan.speed_batch}, {plan.speed_steps} steps an "
        f"epoch, {plan.speed_epochs - 1} timed epochs after a warm-up one)"
    )
    return {"passed": not problems, "detail": detail, "problems": problems, "rows": rows}


def label(row: dict[str, Any]) -> str:
    return (
        f"{row['arch']} {row['precision']}{' channels-last' if row['channels_last'] else ''}"
        f"{' compile ' + row['compile_mode'] if row['compile_mode'] else ''}"
    )


def step_concurrency(ctx: Context) -> dict[str, Any]:
    plan = ctx.plan
    cores = os.cpu_count() or 1
    results: dict[int, dict[str, Any]] = {}
    problems: list[str] = []
    for cells in plan.concurrency:
        if time.time() + plan.window_s + 45 > ctx.deadline and cells != plan.concurrency[0]:
            results[cells] = {"status": "not measured: the time budget was spent"}
            continue
        folder = ctx.path(f"cells{cells}")
        folder.mkdir()
        go = folder / "go"
        knobs = dict(
            arch="resnet20",
            data="cifar10",
            data_dir=str(ctx.data_dir),
            batch_size=plan.speed_batch,
            train_size=plan.concurrency_train,
            epochs=1000,
            lr=0.05,
            augment="on",
            device=plan.device,
            threads=plan.threads or max(1, cores // cells),
            eval_batch_size=1024,
            checkpoint_every=0,
        )
        specs = [
            {
                "knobs": {**knobs, "seed": i},
                "ready": str(folder / f"ready{i}"),
                "go": str(go),
                "stop": str(folder / "stop"),
                "out": str(folder / f"out{i}.json"),
                "window_s": plan.window_s,
                "wait_s": 240,
            }
            for i in range(cells)
        ]
        processes = []
        for i, spec in enumerate(specs):
            spec_path = folder / f"spec{i}.json"
            spec_path.write_text(json.dumps(spec))
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                "throughput",
                "--spec",
                str(spec_path),
            ]
            processes.append(
                subprocess.Popen(
                    command,
                    env=ctx.environment(),
                    cwd=folder,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        try:
            give_up = time.monotonic() + 240
            while not all(Path(s["ready"]).exists() for s in specs):
                dead = [p for p in processes if p.poll() is not None]
                if dead or time.monotonic() > give_up:
                    why = last_lines(dead[0].stderr.read()) if dead else "not ready within 240 s"
                    raise RuntimeError(f"{cells} cells: a cell did not get ready: {why}")
                time.sleep(0.01)
            (folder / "go.tmp").write_text(repr(time.time() + 0.5))
            (folder / "go.tmp").rename(go)
            give_up = time.monotonic() + plan.window_s + 120
            while not all(Path(s["out"]).exists() for s in specs):
                dead = [p for p in processes if p.poll() is not None]
                if dead or time.monotonic() > give_up:
                    why = last_lines(dead[0].stderr.read()) if dead else "no figures 120 s after the window"
                    raise RuntimeError(f"{cells} cells: a cell did not report: {why}")
                time.sleep(0.01)
            (folder / "stop").write_text("")
            for process in processes:
                _, stderr = process.communicate(timeout=120)
                if process.returncode != 0:
                    raise RuntimeError(f"{cells} cells: a cell exited {process.returncode}: {last_lines(stderr)}")
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            problems.append(str(error))
            results[cells] = {"status": f"failed: {error}"}
            continue
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        outs = [json.loads(Path(s["out"]).read_text()) for s in specs]
        starts, ends = [o["wall"][0] for o in outs], [o["wall"][1] for o in outs]
        results[cells] = {
            "status": "measured",
            "images_per_s": sum(o["images_per_s"] for o in outs),
            "per_cell": [o["images_per_s"] for o in outs],
            "threads_per_cell": knobs["threads"],
            "window_s": [min(starts), max(ends)],
            "start_spread_s": max(starts) - min(starts),
        }
    one = results.get(1, {}).get("images_per_s")
    for result in results.values():
        if one and "images_per_s" in result:
            result["speedup"] = result["images_per_s"] / one
    if 1 not in results or results[1]["status"] != "measured":
        problems.append("one cell alone was not measured")
    measured = [k for k, r in results.items() if r["status"] == "measured"]
    detail = (
        f"{', '.join(map(str, measured))} concurrent resnet20 cells measured over a common "
        f"{plan.window_s:g} s window (batch {plan.speed_batch}, evaluation every epoch)"
    )
    return {
        "passed": not problems,
        "detail": detail,
        "problems": problems,
        "cells": {str(k): v for k, v in results.items()},
    }


# -- reading off the goals, and the docs section ------------------------------------------------------


def goals(results: dict[str, Any], dry: bool) -> list[dict[str, Any]]:
    rows = [r for r in results["steps"].get("speed", {}).get("rows", []) if r.get("status") == "measured"]
    nine = [r for r in rows if r["arch"] == "resnet9"]
    read: list[dict[str, Any]] = []
    if nine:
        worst = max(nine, key=lambda r: r["epoch_ratio"])
        read.append(
            {
                "goal": f"a ResNet-9 epoch within {EPOCH_RATIO_GOAL}x of the bare loop at the same precision",
                "figure": f"{worst['epoch_ratio']:.2f}x at worst ({label(worst)}), over {len(nine)} configurations",
                "met": all(r["epoch_ratio"] <= EPOCH_RATIO_GOAL for r in nine),
            }
        )
    else:
        read.append(
            {
                "goal": f"a ResNet-9 epoch within {EPOCH_RATIO_GOAL}x of the bare loop",
                "figure": "not measured",
                "met": None,
            }
        )
    cells = results["steps"].get("concurrency", {}).get("cells", {})
    four = cells.get("4", {}).get("speedup")
    read.append(
        {
            "goal": f"4 concurrent ResNet-20 cells at >= {CONCURRENCY_GOAL}x one cell's images/s",
            "figure": f"{four:.2f}x" if four else "not measured",
            "met": (four >= CONCURRENCY_GOAL) if four else None,
        }
    )
    if dry:
        for item in read:
            item["met"] = None  # toy sizes on a CPU say nothing about a GPU
    return read


def _yes(met: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "-"}[met]


def section(results: dict[str, Any]) -> str:
    m = results["machine"]
    dry = results["dry_run"]
    lines = []
    if dry:
        lines.append(
            f"Dry run (`--dry-run`) on the CPU at toy size: the figures below mean nothing; they show "
            f"that every step runs. {m['cpu']}, {m['cores']} cores, torch {m['torch']}, "
            f"{results['date']}, {results['seconds']:.0f} s."
        )
    else:
        lines.append(
            f"Measured by `python -m benchmarks.gpu_check` on **{m.get('gpu')}** (CUDA {m.get('cuda')}, "
            f"cuDNN {m.get('cudnn')}; host {m['cpu']}, {m['cores']} cores), torch {m['torch']}, "
            f"{results['date']}, commit {results['code'].get('commit')}; the whole check took "
            f"{results['seconds']:.0f} s."
        )
    lines += ["", "| step | what was checked | result |", "| --- | --- | --- |"]
    for step in STEPS:
        r = results["steps"].get(step)
        if r is None:
            continue
        verdict = "passed" if r["passed"] else "**failed**: " + "; ".join(r.get("problems", []))[:400]
        lines.append(f"| ({LETTER[step]}) {step} | {r['detail']} | {verdict} |")
    speed = results["steps"].get("speed", {}).get("rows", [])
    if speed:
        sizes = split_sizes(Plan(**results["plan"]))
        lines += [
            "",
            f"Speed (e): training ms per step (median of the timed epochs, device synchronised); evaluation "
            f"seconds of a whole epoch's evaluation ({sizes['train']:,} clean training images, {sizes['val']:,} "
            f"validation, {sizes['test']:,} test: scaled from the images evaluated, a training subset); and "
            f"a whole epoch ({sizes['train']:,} training images plus that evaluation) against the bare loop's "
            f"training epoch at the same precision, layout and compilation (no evaluation). Both sides: batch "
            f"{results['plan']['speed_batch']}, SGD, the data on the device; initmem augments (crop and flip, "
            f"as the paper's CIFAR cells do), the bare loop does not. `first epoch +s`: what the warm-up "
            f"epoch cost beyond a timed one (compilation, cuDNN's algorithm search).",
            "",
            "| model | precision | channels-last | compile | ms/step | bare ms/step | step ratio | eval s/epoch "
            "| epoch s | bare epoch s | epoch ratio | first epoch +s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in speed:
            head = (
                f"| {r['arch']} | {r['precision']} | {'yes' if r['channels_last'] else 'no'} | "
                f"{r['compile_mode'] or 'no'} |"
            )
            if r["status"] == "measured":
                lines.append(
                    f"{head} {r['step_ms']:.2f} | {r['bare_step_ms']:.2f} | {r['step_ratio']:.2f}x | "
                    f"{r['eval_s_per_epoch']:.2f} | {r['epoch_s']:.2f} | {r['bare_epoch_s']:.2f} | "
                    f"{r['epoch_ratio']:.2f}x | {r['first_epoch_extra_s']:.1f} |"
                )
            else:
                lines.append(f"{head} {r['status']} | | | | | | | |")
    cells = results["steps"].get("concurrency", {}).get("cells", {})
    if cells:
        lines += [
            "",
            "Concurrency (f): ResNet-20 cells as separate processes on one device, tracking off, "
            "evaluation every epoch, timed over one common window; images/s counts training images.",
            "",
            "| cells | total images/s | vs one cell | per cell images/s | CPU threads per cell |",
            "| --- | --- | --- | --- | --- |",
        ]
        for k, r in cells.items():
            if r["status"] == "measured":
                lines.append(
                    f"| {k} | {r['images_per_s']:,.0f} | {r.get('speedup', float('nan')):.2f}x | "
                    f"{', '.join(f'{v:,.0f}' for v in r['per_cell'])} | {r['threads_per_cell']} |"
                )
            else:
                lines.append(f"| {k} | {r['status']} | | | |")
    lines += ["", "Goals of issue 28:", ""]
    for g in results["goals"]:
        lines.append(f"- {g['goal']}: {g['figure']}; met: {_yes(g['met'])}")
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    """Replace what lies between the markers (or add a GPU section with them), leaving the rest."""
    page = path.read_text(encoding="utf-8") if path.exists() else "# Performance\n"
    block = f"{BEGIN}\n{text.strip()}\n{END}"
    if BEGIN in page and END in page:
        start, stop = page.index(BEGIN), page.index(END) + len(END)
        page = page[:start] + block + page[stop:]
    else:
        page = page.rstrip("\n") + "\n\n## GPU\n\n" + block + "\n"
    path.write_text(page, encoding="utf-8")


def gpu_machine(plan: Plan) -> dict[str, Any]:
    import torch

    from benchmarks.bench import machine

    info = machine(argparse.Namespace(device=plan.device))
    if plan.device.startswith("cuda"):
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
    return info


# -- main ---------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true", help="every step at toy size on the CPU")
    parser.add_argument(
        "--docs",
        type=Path,
        help="the page whose GPU section is rewritten (default: docs/PERFORMANCE.md on a GPU; none with --dry-run)",
    )
    parser.add_argument("--json", type=Path, help="also write every result to this JSON file")
    parser.add_argument("--budget", type=float, help="seconds the whole check may take (default 465; dry run 600)")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"a comma-separated subset of {', '.join(STEPS)}")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def fail(message: str) -> None:
    print(f"Error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--as-initmem"]:  # ``initmem ...`` with the synthetic CIFAR files accepted
        skip_cifar_md5()
        sys.argv = ["initmem", *argv[1:]]
        from initmem_cli.entry import main as initmem_main

        initmem_main()
        return 0
    args = parse_args(argv)
    if args.worker:
        skip_cifar_md5()
        WORKERS[args.worker](json.loads(args.spec.read_text()))
        return 0
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        fail(f"--steps: unknown {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    plan = DRY if args.dry_run else FULL
    if args.budget:
        plan = Plan(**{**plan.__dict__, "budget_s": args.budget})
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        fail("no CUDA GPU here: run this on a GPU machine, or pass --dry-run to run every step at toy size on the CPU")
    docs = args.docs or (None if args.dry_run else DOCS)
    from benchmarks.bench import code_version

    began = time.time()
    results: dict[str, Any] = {
        "dry_run": args.dry_run,
        "machine": gpu_machine(plan),
        "code": code_version(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "plan": plan.__dict__,
        "steps": {},
    }
    with tempfile.TemporaryDirectory(prefix="initmem-gpu-check-") as temporary:
        folder = Path(temporary)
        log(f"writing CIFAR-format data ({5 * plan.per_batch:,} + {plan.test_images:,} images)")
        data_dir = write_cifar(folder / "cifar", plan)
        ctx = Context(plan, folder, data_dir, args.dry_run, began + plan.budget_s)

        def attempt(step: str, function: Callable[..., dict[str, Any]], *extra: Any) -> None:
            log(f"({LETTER[step]}) {step} ...")
            started = time.time()
            try:
                result = function(ctx, *extra)
            except Exception as error:
                result = {"passed": False, "detail": step, "problems": [f"{type(error).__name__}: {error}"]}
            result["seconds"] = time.time() - started
            results["steps"][step] = result
            log(
                f"({LETTER[step]}) {step}: {'passed' if result['passed'] else 'FAILED'} in {result['seconds']:.0f} s"
                f" - {result['detail']}" + "".join(f"\n    {p}" for p in result.get("problems", []))
            )

        # (a)-(d) check correctness, not speed: side by side; then (e) and (f) alone on the device.
        checks = {
            "tests": step_tests,
            "determinism": step_determinism,
            "divergence": step_divergence,
            "resume": step_resume,
        }
        with concurrent.futures.ThreadPoolExecutor(max_workers=3 if args.dry_run else 4) as pool:
            for future in [pool.submit(attempt, s, f) for s, f in checks.items() if s in steps]:
                future.result()
        if "speed" in steps:
            reserve = plan.speed_reserve_s if "concurrency" in steps else 0.0
            attempt("speed", step_speed, max(30.0, began + plan.budget_s - time.time() - reserve))
        if "concurrency" in steps:
            attempt("concurrency", step_concurrency)
    results["seconds"] = time.time() - began
    results["goals"] = goals(results, args.dry_run)
    results["passed"] = all(r["passed"] for r in results["steps"].values())
    text = section(results)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    if docs:
        write_section(docs, text)
        log(f"wrote the GPU section of {docs}")
    log(f"{'every step passed' if results['passed'] else 'some steps FAILED'} in {results['seconds']:.0f} s")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
