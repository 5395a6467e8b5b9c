"""What each piece of bookkeeping in initmem's training step costs the host, in microseconds.

    python -m benchmarks.step_costs [--device cpu|cuda] [--batch-size 128] [--threads 1]
    python -m benchmarks.step_costs --full-test [--data-dir DIR] [--epochs 40]

``--full-test`` instead measures what ``--eval-size`` runs pay once: keeping the selected
checkpoint's weights at each improvement of the validation loss, and scoring them on the whole
test split at the end (``training/selection.py``), against the epochs of a paper-fmnist run
(ResNet-20, 500 training images at batch 32, 500 validation and test images scored every epoch):
on Fashion-MNIST's files with ``--data-dir``, else on generated images of its shape and sizes.

``bench.py`` compares whole epochs; this itemises the per-step work initmem's loop
(``initmem_core.training.loop.train``) does beyond a bare loop, each piece timed alone on the real
objects ``build_setup`` makes (best of several rounds of many calls, so noise from other
processes inflates nothing). On the CPU a step runs the model synchronously, so these costs
add to the step; on a GPU they matter only while the host, not the device, is the bottleneck
(small models, small batches: a launch-bound step). Device work of the extra ops is not
waited for here: the figures are what the host spends issuing them.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from initmem_core import get_registry
from initmem_core.config import RunConfig
from initmem_core.training.clocks import ForgettingClocks
from initmem_core.training.plan import plan_run
from initmem_core.training.schedules import lr_multiplier
from initmem_core.training.setup import build_setup


def best_microseconds(function: Callable[[], Any], calls: int = 2000, rounds: int = 7) -> float:
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(calls):
            function()
        best = min(best, (time.perf_counter() - began) / calls)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--full-test", action="store_true", help="the selected checkpoint's one full-test scoring")
    parser.add_argument("--data-dir", default="", help="--full-test: Fashion-MNIST's IDX files (else generated)")
    parser.add_argument("--epochs", type=int, default=40, help="--full-test: the run's epochs it is set against")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.full_test:
        full_test_costs(args)
        return
    config = RunConfig(
        arch="resnet20",
        data=f"synthetic:3x32x32-c10-n{4 * args.batch_size}",
        batch_size=args.batch_size,
        device=args.device,
        threads=args.threads,
    )
    setup = build_setup(plan_run(config, get_registry()))
    device, loader, optimizer, scheduler = setup.device, setup.train_loader, setup.optimizer, setup.scheduler
    n = loader.num_examples
    x, y = next(iter(loader))
    logits = torch.randn(len(y), 10, device=device)
    loss = F.cross_entropy(logits, y)
    loss_sum, correct = torch.zeros((), device=device), torch.zeros((), device=device, dtype=torch.long)
    clocks = ForgettingClocks()
    order = torch.randperm(n, device=device)
    rows = order[: args.batch_size]
    bare_x = (loader.x.float() / loader.pixel_scale - loader.mean) / loader.std

    def accumulate_loss() -> None:
        loss_sum.add_(loss.detach() * len(y))

    def accumulate_correct() -> None:
        correct.add_((logits.argmax(1) == y).sum())

    rule, steps_per_epoch = setup.rule, len(loader)

    def tick() -> None:  # as run_epoch does: the rate as logged, the plan's rule on the schedule
        optimizer.param_groups[0]["lr"]
        clocks.tick(rule.eta(lr_multiplier(config, 3, steps_per_epoch)), len(y), rule.shrink)

    def noop_context() -> None:
        with contextlib.nullcontext():
            x.contiguous(memory_format=torch.contiguous_format)
            logits.float()

    def initmem_batch() -> None:  # DeviceLoader's per-batch work (no augmentation: synthetic)
        images = loader.x.index_select(0, rows)
        loader.y.index_select(0, rows)
        images.to(torch.float32).sub(loader.mean).div_(loader.std)

    def bare_batch() -> None:  # the bare loop's: data normalised once, indexed per batch
        bare_x[rows]
        loader.y[rows]

    items = {
        "scheduler.step() (LambdaLR)": scheduler.step,
        "clocks.tick(rule.eta(lr_multiplier)) + param_groups lookup": tick,
        "loss_sum += loss.detach() * b": accumulate_loss,
        "correct += (argmax == y).sum()": accumulate_correct,
        "nullcontext + .contiguous() + .float()": noop_context,
        "DeviceLoader batch (index_select x2, normalise)": initmem_batch,
        "bare batch (x[rows], y[rows], pre-normalised)": bare_batch,
    }
    try:  # the per-step divergence check and signal check, where this version of the loop has them
        from initmem_core.training.divergence import LossGuard
        from initmem_core.training.stop_signals import StopSignals

        guard, stop = LossGuard(device), StopSignals()
        items["LossGuard.tripped(loss) (divergence check)"] = lambda: guard.tripped(loss)
        items["stop.requested (signal check)"] = lambda: stop.requested
    except ImportError:
        pass
    try:
        from rich.console import Console

        from initmem_cli.progress import RunProgress

        progress = RunProgress(Console(file=open("/dev/null", "w"), force_terminal=False))  # noqa: SIM115
        progress.start(1, 10**9)
        items["RunProgress.advance(1) (the CLI's rich bar)"] = lambda: progress.advance(1)
    except ImportError:
        pass
    print(f"device {device}, batch {args.batch_size}, threads {torch.get_num_threads()}, torch {torch.__version__}")
    # Stepping the scheduler with no optimizer step in between draws torch's ordering warning.
    warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
    for name, function in items.items():
        print(f"{best_microseconds(function):9.1f} us  {name}")
    if device.type == "cuda":
        torch.cuda.synchronize()


def best_seconds(function: Callable[[], Any], device: torch.device, rounds: int = 3) -> float:
    """The best of ``rounds`` timed calls, after one untimed: device work included (synchronised)."""
    best = float("inf")
    for round_ in range(rounds + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        function()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if round_:
            best = min(best, time.perf_counter() - began)
    return best


def full_test_costs(args: argparse.Namespace) -> None:
    """A training epoch, an evaluation point, one copy of the selected weights and the one scoring
    of them on the whole test split, each on the objects ``build_setup`` makes, through the
    loop's own functions."""
    from initmem_core.training.divergence import LossGuard
    from initmem_core.training.loaders import FULL_TEST
    from initmem_core.training.loop import NoProgress, evaluation_row, run_epoch, score_selected
    from initmem_core.training.selection import SelectedCheckpoint
    from initmem_core.training.state import EpochSums
    from initmem_core.training.stop_signals import NoStop

    # Generated: 40,000 training images so that validation and test hold 10,000 each, as Fashion-MNIST's test split.
    data = (
        dict(data="fashion-mnist", data_dir=args.data_dir)
        if args.data_dir
        else dict(data="synthetic:1x28x28-c10-n40000")
    )
    config = RunConfig(
        arch="resnet20",
        train_size=500,
        eval_size=500,
        batch_size=32,
        epochs=args.epochs,
        schedule="cosine",
        device=args.device,
        threads=args.threads,
        **data,
    )
    setup = build_setup(plan_run(config, get_registry()))
    device, model = setup.device, setup.model
    clocks, history = ForgettingClocks(), []
    selection = SelectedCheckpoint(keep_weights=True)

    def epoch() -> None:
        run_epoch(setup, 1, 0, EpochSums.zero(device), clocks, LossGuard(device), NoProgress(), NoStop())

    def point() -> None:
        evaluation_row(setup, 1, history, clocks, (0.0, 0.0), 0.01)

    row = {"epoch": 1, **evaluation_row(setup, 1, history, clocks, (0.0, 0.0), 0.01, selection)}
    history.append(row)
    improvements = iter(range(10**9))

    def keep() -> None:  # an improvement every call: the copy into the buffers allocated at the first
        selection.offer(model, 1, -float(next(improvements)), selection.test_correct)

    train_s, point_s = best_seconds(epoch, device), best_seconds(point, device)
    keep_us = best_microseconds(keep, calls=50, rounds=5)
    selection.epoch = 1
    score_s = best_seconds(lambda: score_selected(setup, selection, history), device, rounds=2)
    n_test, n_capped = setup.eval_loaders[FULL_TEST].num_examples, setup.eval_loaders["test"].num_examples
    run_s = args.epochs * (train_s + point_s) + point_s  # and the initialization's evaluation point
    weights_mb = sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 2**20
    print(f"{config.data}: device {device}, threads {torch.get_num_threads()}, torch {torch.__version__}")
    print(
        f"{train_s:9.3f} s   training epoch ({setup.train_loader.num_examples} images, {len(setup.train_loader)} steps)"
    )
    print(f"{point_s:9.3f} s   evaluation point (clean train, val, test {n_capped}, metrics)")
    print(f"{keep_us:9.1f} us  keeping the selected weights (one copy, {weights_mb:.2f} MiB, at an improvement)")
    print(f"{score_s:9.3f} s   scoring the selected checkpoint on the whole test split ({n_test} images)")
    print(
        f"{run_s:9.1f} s   a {args.epochs}-epoch run's epochs and evaluation points: "
        f"the one full scoring adds {100 * score_s / run_s:.1f}%"
    )


if __name__ == "__main__":
    main()
