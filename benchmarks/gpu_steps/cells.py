"""(b) ``determinism``, (c) ``divergence`` and (d) ``resume``: small cells, each run in its own
process, checked for exact agreement.

(b) one small cell run twice with ``--deterministic``, each in its own process: every metric of
    every epoch and every final weight must be bit-identical. The first run is also (d)'s
    uninterrupted run (the reference, run once by whichever step asks first).
(c) an optimizer plugin writes a NaN into the first convolution after step 6; the divergence
    guard must stop the run at exactly step 7 (``Diverged.step``), in epoch 2.
(d) ``initmem run --no-tracking --checkpoint-dir`` is SIGKILLed after its epoch-2 checkpoint and
    continued in another process by ``initmem_core.run(resume=True)`` (what ``--resume`` runs)
    with an in-memory tracker: every metric it logs and its ``final_weights.pt`` must equal the
    reference's, and the weights must load onto the CPU without ``map_location``. (The MLflow
    side of a resume does not depend on the device; tests/core/training/test_resume.py covers it.)
"""

from __future__ import annotations

import io
import math
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.gpu_steps.common import (
    Context,
    Plan,
    cli_args,
    history_differences,
    last_lines,
    same_value,
    weight_differences,
)
from initmem_core import hookimpl

POISON_AFTER_STEP = 6  # (c): NaN written into a weight after this step; the next step's loss is NaN
POISON_BATCH, POISON_TRAIN = 16, 64  # 4 steps an epoch: step 7 is the 3rd step of epoch 2


# The cells: SGD with momentum and augmentation, so optimizer state and every RNG matter.
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


WORKERS = {"run": worker_run}


def reference_knobs(ctx: Context) -> dict[str, Any]:
    """The uninterrupted cell of (b) and (d)."""
    return cell_knobs(ctx.plan, ctx.data_dir, epochs=ctx.plan.resume_epochs, deterministic=True)


def reference(ctx: Context) -> dict[str, Any]:
    """The reference cell, run once by whichever of (b) and (d) asks first (they run side by side,
    each in its own process: a file lock in the shared folder)."""
    import torch
    from filelock import FileLock

    path = ctx.folder / "reference-cell.pt"
    with FileLock(str(ctx.folder / "reference-cell.lock"), timeout=max(1.0, ctx.left_s())):
        if not path.exists():
            run_cell(ctx, reference_knobs(ctx)).rename(path)
    return torch.load(path, weights_only=True)


def run_cell(ctx: Context, knobs: dict[str, Any], **extra: Any) -> Path:
    out = ctx.path("cell").with_suffix(".pt")
    done = ctx.worker("run", {"knobs": knobs, "out": str(out), **extra}, ctx.left_s())
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"the cell's process exited {done.returncode}: {last_lines(done.stderr)}")
    return out


def cell(ctx: Context, knobs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    import torch

    return torch.load(run_cell(ctx, knobs, **extra), weights_only=True)


def determinism(ctx: Context) -> dict[str, Any]:
    knobs = reference_knobs(ctx)
    first, second = reference(ctx), cell(ctx, knobs)
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


def divergence(ctx: Context) -> dict[str, Any]:
    knobs = cell_knobs(
        ctx.plan,
        ctx.data_dir,
        opt="gpu-check-nan-sgd",
        epochs=3,
        batch_size=POISON_BATCH,
        train_size=POISON_TRAIN,
        momentum=0.0,
    )
    result = cell(ctx, knobs, poison_after=POISON_AFTER_STEP)
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


def resume(ctx: Context) -> dict[str, Any]:
    import torch

    knobs = reference_knobs(ctx)
    epochs = knobs["epochs"]
    folder = ctx.path("resume")
    checkpoints = folder / "checkpoints"
    args = ["run", *cli_args(knobs), "--no-tracking", "--checkpoint-dir", str(checkpoints), "--checkpoint-every", "1"]
    # ``initmem ARGS`` through gpu_check.py, so that the synthetic CIFAR files pass the md5 check.
    killed = subprocess.Popen(
        ctx.command("--as-initmem", *args),
        env=ctx.environment(),
        cwd=ctx.folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    while not list(checkpoints.glob("*/ckpt-e000002-*.pt")):
        if killed.poll() is not None:
            raise RuntimeError(f"the run ended before its epoch-2 checkpoint: {last_lines(killed.stderr.read())}")
        if ctx.left_s() < 2:
            killed.kill()
            raise RuntimeError("no epoch-2 checkpoint before the step's deadline")
        time.sleep(0.002)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    killed.stderr.close()
    problems = []
    if list(checkpoints.glob(f"*/ckpt-e{epochs:06d}-*.pt")):
        problems.append("killed too late: the run had finished")
    resumed = cell(ctx, {**knobs, "checkpoint_dir": str(checkpoints), "checkpoint_every": 1}, resume=True)
    uninterrupted = reference(ctx)
    differing = history_differences(uninterrupted["history"], resumed["history"])
    if differing:
        problems.append(f"the history differs from the uninterrupted run's: {'; '.join(differing[:3])}")
    logged: dict[str, list[tuple[int, float]]] = {}
    for step, key, value in resumed["logged"]:
        logged.setdefault(key, []).append((int(step), value))
    compared = 0
    for key in sorted({k for row in uninterrupted["history"] for k in row} - {"epoch"}):
        expected = [(row["epoch"], row[key]) for row in uninterrupted["history"] if key in row]
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
        differing = weight_differences(uninterrupted["weights"], {k: v.cpu() for k, v in weights.items()})
        if differing:
            problems.append(f"final weights differ from the uninterrupted run's: {', '.join(differing[:5])}")
    detail = (
        f"`initmem run` ({epochs} epochs, `--deterministic`) SIGKILLed after its epoch-2 checkpoint, then "
        f"resumed (`initmem_core.run(resume=True)`, as `--resume` does): {compared} logged values and the "
        f"final weights compared with the uninterrupted run of (b)"
        + (": identical, final_weights.pt on the CPU" if not problems else "")
    )
    return {"passed": not problems, "detail": detail, "problems": problems}
