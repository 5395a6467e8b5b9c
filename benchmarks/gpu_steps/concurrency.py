"""(f) ``concurrency``: total training images/s of 1, 2, 4 and 8 ResNet-20 cells (separate
processes, tracking off, evaluation every epoch as a cell does) sharing the device, all timed over
the same wall-clock window (``common.run_together``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from benchmarks.gpu_steps.common import Context, Together, run_together, together_figures

ROUND_S = 25.0  # what a round of cells is expected to take beyond its window (start, warm-up, stop)


class WindowEnd(Exception):
    """Raised from inside the training loop when every cell's window is over."""


class Window:
    """A ``Progress`` for one cell: after its first epoch (warm) it waits for the common start,
    counts its training steps until its window closes and reports them, then trains on, uncounted,
    until told to stop."""

    def __init__(self, spec: dict[str, Any], sync: Callable[[], None]):
        self.together, self.spec, self.sync = Together(spec), spec, sync
        self.phase = "warm"
        self.steps = 0
        self.began = 0.0
        self.wall_began = 0.0

    def start(self, epochs: int, steps_per_epoch: int) -> None:
        pass

    def _check(self) -> None:
        if self.phase == "timing" and time.perf_counter() >= self.began + self.spec["window_s"]:
            self.sync()
            ended = time.perf_counter()
            images = self.steps * self.spec["knobs"]["batch_size"]
            self.together.report(
                {
                    "images": images,
                    "seconds": ended - self.began,
                    "images_per_s": images / (ended - self.began),
                    "wall": [self.wall_began, time.time()],
                }
            )
            self.phase = "draining"
        elif self.phase == "draining" and self.together.stopped():
            raise WindowEnd

    def advance(self, steps: int) -> None:
        if self.phase == "timing":
            self.steps += steps
        self._check()

    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None:
        if epoch >= 1 and self.phase == "warm":
            self.sync()
            self.together.wait_for_start()
            self.sync()
            self.began, self.wall_began = time.perf_counter(), time.time()
            self.phase = "timing"
        else:
            self._check()


def worker_throughput(spec: dict[str, Any]) -> None:
    import torch

    import initmem_core
    from benchmarks.timing import synchronizer

    window = Window(spec, synchronizer(torch.device(spec["knobs"]["device"])))
    try:
        initmem_core.run(tracking=False, progress=window, **spec["knobs"])
        raise RuntimeError("the cell finished before the window closed: give it more epochs")
    except WindowEnd:
        pass


WORKERS = {"throughput": worker_throughput}


def run(ctx: Context) -> dict[str, Any]:
    plan = ctx.plan
    cores = os.cpu_count() or 1
    results: dict[int, dict[str, Any]] = {}
    problems: list[str] = []
    for cells in plan.concurrency:
        if ctx.left_s() < plan.window_s + ROUND_S and cells != plan.concurrency[0]:
            results[cells] = {"status": "not measured: the time budget was spent"}
            continue
        knobs = dict(
            arch="resnet20",
            data="cifar10",
            data_dir=str(ctx.data_dir),
            batch_size=plan.speed_batch,
            train_size=plan.concurrency_train,
            eval_size=plan.cell_eval_size,
            epochs=1000,
            lr=0.05,
            augment="on",
            device=plan.device,
            threads=plan.threads or max(1, cores // cells),
            eval_batch_size=1024,
            checkpoint_every=0,
        )
        specs = [{"knobs": {**knobs, "seed": i}, "window_s": plan.window_s} for i in range(cells)]
        try:
            outs = run_together(ctx, "throughput", specs, f"cells{cells}")
        except RuntimeError as error:
            problems.append(str(error))
            results[cells] = {"status": f"failed: {error}"}
            continue
        results[cells] = {
            **together_figures(outs, "per_cell"),
            "threads_per_cell": knobs["threads"],
            "window_s": [min(o["wall"][0] for o in outs), max(o["wall"][1] for o in outs)],
        }
        ctx.save(summarise(plan.window_s, plan.speed_batch, results, problems))
    return summarise(plan.window_s, plan.speed_batch, results, problems)


def summarise(window_s: float, batch: int, results: dict[int, dict[str, Any]], problems: list[str]) -> dict[str, Any]:
    one = results.get(1, {}).get("images_per_s")
    for result in results.values():
        if one and "images_per_s" in result:
            result["speedup"] = result["images_per_s"] / one
    problems = list(problems)
    if results.get(1, {}).get("status") != "measured":
        problems.append("one cell alone was not measured")
    measured = [k for k, r in results.items() if r["status"] == "measured"]
    detail = (
        f"{', '.join(map(str, measured)) or 'no'} concurrent resnet20 cells measured over a common "
        f"{window_s:g} s window (batch {batch}, evaluation every epoch)"
    )
    return {
        "passed": not problems,
        "detail": detail,
        "problems": problems,
        "cells": {str(k): v for k, v in results.items()},
    }
