"""(e) ``speed``: ms per training step and evaluation seconds per epoch of ResNet-20 and ResNet-9
on the synthetic CIFAR files (read by the built-in ``cifar10`` plugin with ``--data-dir``), in
fp32, TF32 and bf16, each with and without channels-last and ``--compile`` (modes default and
reduce-overhead), against ``timing.BareLoop``: an airbench-style bare loop at the same precision
and layout (the data one normalised tensor on the device, the same model, optimizer and batch, no
tracking, no eval). Configurations run in order of importance while the step's time lasts; the
rest are listed as not measured. Every clock read is preceded by a device synchronisation.
"""

from __future__ import annotations

import functools
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.gpu_steps.common import Context, missing_knobs, split_sizes

#: Seconds one configuration is expected to take, eager and compiled (a start needs this much left).
ESTIMATE_S = {"dry": (4.0, 75.0), "full": (8.0, 60.0)}


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
    from benchmarks.timing import BareLoop, synchronizer
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
    setup_module.use_precision(config["tf32"])
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


def run(ctx: Context) -> dict[str, Any]:
    """Each configuration in turn, in this process, the rows saved after each, until the step's
    time is spent; a configuration whose estimated cost does not fit is left out."""
    import torch

    # Many compiled configurations in one process: without this, TorchDynamo gives up recompiling
    # after 8 variants of the model's forward and silently runs the rest eagerly.
    torch._dynamo.config.recompile_limit = 256
    torch._dynamo.config.accumulated_recompile_limit = 4096
    # The same files for every configuration: read them once (saves a second or two per run).
    from initmem_plugins.datasets import cifar

    cifar._read = functools.lru_cache(maxsize=None)(cifar._read)
    plan = ctx.plan
    spec = {
        "data_dir": str(ctx.data_dir),
        "device": plan.device,
        "threads": plan.threads,
        "batch": plan.speed_batch,
        "steps": plan.speed_steps,
        "epochs": plan.speed_epochs,
        "sizes": split_sizes(plan),
    }
    eager_s, compiled_s = ESTIMATE_S["dry" if ctx.dry else "full"]
    configs = speed_configs(ctx.dry)
    rows: list[dict[str, Any]] = []
    for config in configs:
        if ctx.left_s() - 5 < (compiled_s if config["compile_mode"] else eager_s):
            rows.append({**config, "status": "not measured: the time budget was spent"})
        else:
            try:
                rows.append(measure_speed(config, spec))
            except Exception as error:  # reported in the table; the other configurations still run
                first = (str(error).splitlines() or [""])[0][:200]
                rows.append({**config, "status": f"failed: {type(error).__name__}: {first}"})
        ctx.save(summarise(ctx, rows, len(configs)))
    return summarise(ctx, rows, len(configs))


def summarise(ctx: Context, rows: list[dict[str, Any]], configs: int) -> dict[str, Any]:
    plan = ctx.plan
    measured = [row for row in rows if row["status"] == "measured"]
    failed = [row for row in rows if row["status"].startswith("failed")]
    problems = [f"{label(row)}: {row['status']}" for row in failed]
    eager_fp32 = [row for row in measured if row["precision"] == "fp32" and not row["compile_mode"]]
    if len({row["arch"] for row in eager_fp32}) < 2:
        problems.append("the eager fp32 runs of both architectures were not measured")
    if any(not (row["step_ms"] > 0 and row["bare_step_ms"] > 0 and row["eval_s_per_epoch"] > 0) for row in measured):
        problems.append("a timing is not positive")
    detail = (
        f"{len(measured)} of {configs} configurations measured"
        f"{f', {len(failed)} failed' if failed else ''} (batch {plan.speed_batch}, {plan.speed_steps} steps an "
        f"epoch, {plan.speed_epochs - 1} timed epochs after a warm-up one)"
    )
    return {"passed": not problems, "detail": detail, "problems": problems, "rows": rows}


def label(row: dict[str, Any]) -> str:
    return (
        f"{row['arch']} {row['precision']}{' channels-last' if row['channels_last'] else ''}"
        f"{' compile ' + row['compile_mode'] if row['compile_mode'] else ''}"
    )
