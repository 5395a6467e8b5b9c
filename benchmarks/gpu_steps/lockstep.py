"""(g) ``lockstep``: K ResNet-20s trained in one fused model
(``initmem_plugins.architectures.fused_cifar_resnet``) against K concurrent processes training one
each, in training images/s (K models x batch per step), in bf16 with channels-last first, then fp32
if time is left.

Both sides run the same bare loop: synthetic batches resident on the device, SGD with momentum
and weight decay, no evaluation, no tracking, each model initialized with its own sigma. The
fused side is timed in one process, one K after another (after a warm-up that covers cuDNN's
algorithm search); the K processes are timed over one common window (``common.run_together``).
K = 1 is one process training one plain CifarResNet, the baseline of both sides.

Then the product path, what ``initmem sweep --lockstep`` runs (``lockstep_job.run_lockstep``):
K whole ResNet-20 cells of one sigma group (building, training with augmentation, evaluation every
epoch, selection, summary; tracking off: each cell's run in memory) as one fused job in one
process, against one such cell alone, and against K processes running one cell each, started
together, in cells per hour. The figure that decides whether initmem should train sigma groups in
lockstep on this device: the fused job's cells per hour over K processes'.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu_steps.common import Context, Together, last_lines, run_together, together_figures, write_json

SIGMA_RANGE = (0.25, 4.0)  # a sigma group's scales, spread geometrically over the K models
POOL = 8  # distinct batches cycled through (resident on the device)
BLOCKS = 3  # ResNet-20
BUILD_S = 4.0  # what building and warming one fused configuration is expected to take beyond its window
ROUND_S = 25.0  # a round of K processes beyond its window (start, CUDA context, warm-up, stop)
PRODUCT_S = 30.0  # what the product path needs at least: three process starts and K + 1 + K small cells
PRECISIONS = (("bf16", True), ("fp32", False))  # (precision, channels-last), most important first


def sigmas(models: int) -> list[float]:
    low, high = SIGMA_RANGE
    if models == 1:
        return [math.sqrt(low * high)]
    return [low * (high / low) ** (i / (models - 1)) for i in range(models)]


class Trainer:
    """The bare loop of one side: ``fused`` K models in one network, or one plain CifarResNet."""

    def __init__(self, spec: dict[str, Any], models: int, fused: bool, seed: int = 0):
        import torch
        import torch.nn.functional as F

        from benchmarks.timing import synchronizer
        from initmem_core.training.setup import use_precision
        from initmem_plugins.architectures.cifar_resnet import CifarResNet
        from initmem_plugins.architectures.fused_cifar_resnet import FusedCifarResNet, lockstep_loss
        from initmem_plugins.initializers.fan_in import fan_in_init

        self.torch, self.device = torch, torch.device(spec["device"])
        use_precision("off")  # fp32 is fp32 (PyTorch's default runs cuDNN convolutions in TF32)
        self.bf16 = spec["precision"] == "bf16"
        self.layout = torch.channels_last if spec["channels_last"] else torch.contiguous_format
        separate = []
        for k, sigma in enumerate(sigmas(models)):
            torch.manual_seed(seed * 1000 + k)
            model = CifarResNet(BLOCKS)
            fan_in_init(model=model, sigma=sigma, generator=torch.Generator().manual_seed(seed * 1000 + k))
            separate.append(model)
        model = FusedCifarResNet.from_models(separate, BLOCKS) if fused else separate[0]
        self.model = model.to(self.device, memory_format=self.layout).train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        self.loss = lockstep_loss if fused else F.cross_entropy
        generator = torch.Generator().manual_seed(seed)
        batch = spec["batch"]
        self.x = torch.randn(POOL, batch, 3, 32, 32, generator=generator).to(self.device)
        self.x = [x.contiguous(memory_format=self.layout) for x in self.x]
        self.y = torch.randint(0, 10, (POOL, batch), generator=generator).to(self.device)
        self.images_per_step = batch * models
        self.steps = 0
        self.sync = synchronizer(self.device)

    def step(self) -> None:
        i = self.steps % POOL
        with self.torch.autocast(self.device.type, dtype=self.torch.bfloat16, enabled=self.bf16):
            loss = self.loss(self.model(self.x[i]), self.y[i])
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.steps += 1

    def timed(self, seconds: float) -> dict[str, float]:
        """Steps until ``seconds`` have passed (checked every step, the device synchronised at both ends)."""
        self.sync()
        began, steps = time.perf_counter(), self.steps
        while time.perf_counter() < began + seconds:
            self.step()
        self.sync()
        elapsed, done = time.perf_counter() - began, self.steps - steps
        return {"steps": done, "seconds": elapsed, "images_per_s": done * self.images_per_step / elapsed}


def threads(spec: dict[str, Any], processes: int) -> None:
    import torch

    torch.set_num_threads(spec["threads"] or max(1, (os.cpu_count() or 1) // processes))


def worker_fused(spec: dict[str, Any]) -> None:
    """In one process: one plain model, then the fused model at each K, rows saved after each."""
    threads(spec, 1)
    rows = []
    for models, fused in [(1, False), *((k, True) for k in spec["models"])]:
        if time.time() + spec["window_s"] + BUILD_S > spec["deadline"]:
            rows.append({"models": models, "fused": fused, "status": "not measured: the time budget was spent"})
        else:
            trainer = Trainer(spec, models, fused)
            for _ in range(spec["warmup"]):
                trainer.step()
            rows.append({"models": models, "fused": fused, "status": "measured", **trainer.timed(spec["window_s"])})
            del trainer
        write_json(Path(spec["rows"]), rows)


def worker_process(spec: dict[str, Any]) -> None:
    """One of K processes: one plain model, warm, timed over the common window, then busy until told to stop."""
    together = Together(spec)
    threads(spec, spec["processes"])
    trainer = Trainer(spec, 1, fused=False, seed=spec["seed"])
    for _ in range(spec["warmup"]):
        trainer.step()
    trainer.sync()
    together.wait_for_start()
    wall = time.time()
    figures = trainer.timed(spec["window_s"])
    together.report({**figures, "wall": [wall, time.time()]})
    while not together.stopped():
        trainer.step()


def product_knobs(plan: Any, data_dir: str, threads: int) -> dict[str, Any]:
    """One cell of the product path: a small ResNet-20 cell on the synthetic CIFAR files."""
    return dict(
        arch="resnet20",
        data="cifar10",
        data_dir=data_dir,
        batch_size=plan.lockstep_batch,
        train_size=plan.lockstep_cell_train,
        eval_size=plan.cell_eval_size,
        epochs=plan.lockstep_cell_epochs,
        lr=0.05,
        momentum=0.9,
        augment="on",
        device=plan.device,
        threads=threads,
        eval_batch_size=1024,
    )


def one_cell(knobs: dict[str, Any], sigma: float) -> float:
    """Seconds one cell takes as a sweep runs it (``run_cell``: a tracker of its own, here in memory)."""
    from initmem_core.config import RunConfig
    from initmem_core.tracking.tracker import MemoryTracker
    from initmem_core.training.runner import run

    began = time.perf_counter()
    run(RunConfig(**knobs, sigma=sigma), tracker=MemoryTracker())
    return time.perf_counter() - began


def worker_product(spec: dict[str, Any]) -> None:
    """``alone``: one cell, then K cells as one fused job, rows saved after each; ``together``: one
    of K processes, each running one cell from the common start."""
    import initmem_core.training.runner  # noqa: F401  (imported before any clock starts)
    import initmem_plugins.executors.lockstep_job  # noqa: F401

    knobs, models = spec["knobs"], spec["models"]
    if spec["mode"] == "together":
        together = Together(spec)
        together.wait_for_start()
        wall = time.time()
        seconds = one_cell(knobs, sigmas(models)[spec["seed"]])
        together.report({"seconds": seconds, "wall": [wall, time.time()]})
        return
    from initmem_core.config import RunConfig
    from initmem_core.tracking.tracker import MemoryTracker
    from initmem_plugins.executors.lockstep_job import run_lockstep

    rows = [{"side": "one cell", "cells": 1, "seconds": one_cell(knobs, sigmas(1)[0])}]
    write_json(Path(spec["rows"]), rows)
    configs = [RunConfig(**knobs, sigma=sigma) for sigma in sigmas(models)]
    began = time.perf_counter()
    outcomes = run_lockstep(configs, [MemoryTracker() for _ in configs])
    rows.append({"side": "fused", "cells": models, "seconds": time.perf_counter() - began, "outcomes": outcomes})
    write_json(Path(spec["rows"]), rows)


WORKERS = {"lockstep-fused": worker_fused, "lockstep-process": worker_process, "lockstep-product": worker_product}


def product(ctx: Context) -> dict[str, Any]:
    """The product path at K = ``plan.lockstep_product_models``: one cell, the fused job, K processes."""
    plan, models = ctx.plan, ctx.plan.lockstep_product_models
    cores = os.cpu_count() or 1
    knobs = product_knobs(plan, str(ctx.data_dir), plan.threads or cores)
    rows_path = ctx.path("product").with_suffix(".json")
    spec = {"mode": "alone", "knobs": knobs, "models": models, "rows": str(rows_path)}
    problems: list[str] = []
    try:
        done = ctx.worker("lockstep-product", spec, ctx.left_s() - 1)
        if done.returncode != 0:
            problems.append(f"the product path's fused process exited {done.returncode}: {last_lines(done.stderr)}")
    except Exception as error:
        problems.append(f"the product path's fused process: {type(error).__name__}: {error}")
    rows = {row["side"]: row for row in (json.loads(rows_path.read_text()) if rows_path.exists() else [])}
    failed = [o for o in rows.get("fused", {}).get("outcomes", []) if o[0] != "FINISHED"]
    if failed:
        problems.append(f"the fused job's cells did not all finish: {failed}")
    together = {**knobs, "threads": plan.threads or max(1, cores // models)}
    specs = [{"mode": "together", "knobs": together, "models": models, "seed": i} for i in range(models)]
    try:
        outs = run_together(ctx, "lockstep-product", specs, f"product-{models}")
        began = min(o["wall"][0] for o in outs)
        rows["processes"] = {"side": "processes", "cells": models, "seconds": max(o["wall"][1] for o in outs) - began}
        rows["processes"]["per_process_s"] = [o["seconds"] for o in outs]
    except RuntimeError as error:
        problems.append(str(error))
    figures: dict[str, Any] = {"models": models, "knobs": knobs, "problems": problems}
    for side, row in rows.items():
        figures[side] = {**row, "cells_per_hour": row["cells"] * 3600 / row["seconds"]}
    hourly = {side: figures[side]["cells_per_hour"] for side in rows}
    if "fused" in hourly and "one cell" in hourly:
        figures["fused_vs_one_cell"] = hourly["fused"] / hourly["one cell"]
    if "fused" in hourly and "processes" in hourly:
        figures["fused_vs_processes"] = hourly["fused"] / hourly["processes"]
    return figures


def measure(ctx: Context, precision: str, channels_last: bool) -> dict[str, Any]:
    """One precision: the fused side in one process, then K processes for each K > 1."""
    plan = ctx.plan
    base = {
        "device": plan.device,
        "threads": plan.threads,
        "precision": precision,
        "channels_last": channels_last,
        "batch": plan.lockstep_batch,
        "window_s": plan.window_s,
        "warmup": plan.lockstep_warmup,
    }
    rows_path = ctx.path(f"fused-{precision}").with_suffix(".json")
    spec = {**base, "models": list(plan.lockstep_models), "rows": str(rows_path), "deadline": ctx.deadline - 2}
    problems: list[str] = []
    try:
        done = ctx.worker("lockstep-fused", spec, ctx.left_s() - 1)
        if done.returncode != 0:
            problems.append(f"the fused process exited {done.returncode}: {last_lines(done.stderr)}")
    except Exception as error:  # a timeout or a crash: reported, and the processes are still measured
        problems.append(f"the fused process: {type(error).__name__}: {error}")
    rows = json.loads(rows_path.read_text()) if rows_path.exists() else []
    single = next((r for r in rows if not r["fused"] and r["status"] == "measured"), None)
    fused = {r["models"]: r for r in rows if r["fused"]}
    processes: dict[int, dict[str, Any]] = {}
    if single:
        processes[1] = {
            "status": "measured",
            "images_per_s": single["images_per_s"],
            "per_process": [single["images_per_s"]],
        }
    for k in plan.lockstep_models:
        if k == 1:
            continue
        if ctx.left_s() < plan.window_s + ROUND_S:
            processes[k] = {"status": "not measured: the time budget was spent"}
            continue
        specs = [{**base, "seed": i, "processes": k} for i in range(k)]
        try:
            outs = run_together(ctx, "lockstep-process", specs, f"lockstep-{precision}-{k}")
        except RuntimeError as error:
            problems.append(str(error))
            processes[k] = {"status": f"failed: {error}"}
            continue
        processes[k] = together_figures(outs, "per_process")
    table = []
    for k in plan.lockstep_models:
        f, p = fused.get(k, {}), processes.get(k, {})
        row = {
            "models": k,
            "fused_status": f.get("status", "not measured"),
            "processes_status": p.get("status", "not measured"),
            "fused_images_per_s": f.get("images_per_s"),
            "processes_images_per_s": p.get("images_per_s"),
            "per_process": p.get("per_process"),
        }
        if row["fused_images_per_s"] and row["processes_images_per_s"]:
            row["fused_vs_processes"] = row["fused_images_per_s"] / row["processes_images_per_s"]
        if row["fused_images_per_s"] and single:
            row["fused_vs_one_model"] = row["fused_images_per_s"] / single["images_per_s"]
        table.append(row)
    return {
        "precision": precision,
        "channels_last": channels_last,
        "one_model_images_per_s": single["images_per_s"] if single else None,
        "rows": table,
        "fused_samples": rows,
        "problems": problems,
    }


def run(ctx: Context) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    product_figures: dict[str, Any] = {}
    for precision, channels_last in PRECISIONS if ctx.plan.lockstep_fp32 else PRECISIONS[:1]:
        if results and ctx.left_s() < ctx.plan.window_s * (len(ctx.plan.lockstep_models) + 1) + 2 * ROUND_S:
            results.append(
                {
                    "precision": precision,
                    "channels_last": channels_last,
                    "rows": [],
                    "problems": [],
                    "status": "not measured: the time budget was spent",
                }
            )
            continue
        results.append(measure(ctx, precision, channels_last))
        ctx.save(summarise(ctx, results, product_figures))
    if ctx.left_s() < PRODUCT_S:
        product_figures = {"status": "not measured: the time budget was spent", "problems": []}
    else:
        product_figures = product(ctx)
    return summarise(ctx, results, product_figures)


def summarise(ctx: Context, results: list[dict[str, Any]], product_figures: dict[str, Any]) -> dict[str, Any]:
    first = results[0] if results else {"rows": []}
    problems = [p for r in results for p in r.get("problems", [])] + product_figures.get("problems", [])
    if "fused_vs_processes" not in product_figures:
        problems.append("the product path: the fused job and K processes not both measured")
    complete = [r for r in first["rows"] if "fused_vs_processes" in r]
    if len(complete) < len(ctx.plan.lockstep_models):
        problems.append(f"{first.get('precision', 'bf16')}: fused and processes not both measured at every K")
    measured = ", ".join(f"K={r['models']} {r['fused_vs_processes']:.2f}x" for r in complete) or "nothing"
    detail = (
        f"fused K ResNet-20s vs K processes (batch {ctx.plan.lockstep_batch} per model, "
        f"{ctx.plan.window_s:g} s windows), {first.get('precision', 'bf16')}"
        f"{' channels-last' if first.get('channels_last') else ''}: {measured}"
    )
    if "fused_vs_processes" in product_figures:
        detail += (
            f"; product path (whole cells, evaluation, tracking off), K={product_figures['models']}: "
            f"{product_figures['fused_vs_processes']:.2f}x K processes, "
            f"{product_figures['fused_vs_one_cell']:.2f}x one cell"
        )
    return {
        "passed": not problems,
        "detail": detail,
        "problems": problems,
        "precisions": results,
        "product": product_figures,
    }
