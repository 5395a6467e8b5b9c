"""What a checkpoint costs the training thread, early in a run and late in a long one.

    python -m benchmarks.checkpoint_costs [--arch resnet20] [--momentum 0.9] [--late-epoch 5000]

Times, on the state ``build_setup`` makes (best of several rounds, so noise from other
processes inflates nothing):

- ``snapshot``: ``training.state.snapshot``, the references to the live state;
- ``capture``: what ``CheckpointStore.save`` does on the training thread (pack every tensor into
  one flat buffer per dtype; extend the history table of the previous save by the new row),
  after which training goes on;
- ``encode + write``: what the background thread then does (``torch.save`` into memory, one write,
  fsync, rename), timed here on this thread;
- ``unpacked torch.save``: the format-1 way, the whole payload (its per-layer table as Python rows,
  as it was kept then) through ``torch.save`` into a file on the training thread, tensor by
  tensor and value by value.

"Early" is epoch 10 of the default run; "late" adds a history of ``--late-epoch`` rows and the
per-layer norm table that long, as a 5,000-epoch run (the paper-long preset) carries.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from initmem_core import get_registry
from initmem_core.config import RunConfig
from initmem_core.training.checkpoint_format import capture, header, history_columns
from initmem_core.training.checkpoint_store import CheckpointStore
from initmem_core.training.clocks import ForgettingClocks
from initmem_core.training.plan import plan_run
from initmem_core.training.setup import build_setup
from initmem_core.training.state import EpochSums, snapshot
from initmem_core.vocabulary import PER_EPOCH_METRICS


def best_milliseconds(function: Callable[[], Any], rounds: int = 15) -> float:
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - began)
    return best * 1e3


def payload_at(setup, config: RunConfig, epochs: int) -> dict[str, Any]:
    """A checkpoint payload after ``epochs`` epochs: the real state, with a history and a
    per-layer norm table of that length (values made up; their count is what costs)."""
    metrics = setup.metrics
    norms = metrics.get("weight-norms")
    if norms is not None:
        layers = [name for name, p in setup.model.named_parameters() if p.dim() > 1]
        norms.layers = layers
        norms.epochs = list(range(epochs + 1))
        norms.per_layer = [torch.rand(len(layers), 4) for _ in range(epochs + 1)]
    figures = PER_EPOCH_METRICS
    history = [{"epoch": epoch, **{key: float(torch.rand(())) for key in figures}} for epoch in range(epochs + 1)]
    state = snapshot(
        setup, (epochs, 0), ForgettingClocks(), history, EpochSums.zero(setup.device), setup.train_loader.state_dict()
    )
    return {**header(config, config.config_hash(), "0" * 32), **state}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="resnet20")
    parser.add_argument("--momentum", type=float, default=0.0, help="0.9: SGD keeps a momentum buffer per parameter")
    parser.add_argument("--late-epoch", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = RunConfig(arch=args.arch, momentum=args.momentum, threads=args.threads)
    setup = build_setup(plan_run(config, get_registry()))
    if args.momentum:  # one step, so that the optimizer holds its buffers
        x, y = next(iter(setup.train_loader))
        torch.nn.functional.cross_entropy(setup.model(x), y).backward()
        setup.optimizer.step()

    folder = Path(tempfile.mkdtemp(prefix="initmem-checkpoint-costs-"))
    print(f"{args.arch}, momentum {args.momentum}, {torch.get_num_threads()} thread(s); best of 15, ms")
    print(f"{'':>14} {'snapshot':>9} {'capture':>9} {'encode+write':>13} {'file MB':>8} {'unpacked torch.save':>20}")
    for label, epochs in (("early (10)", 10), (f"late ({args.late_epoch})", args.late_epoch)):
        payload = payload_at(setup, config, epochs)
        history = payload["history"]
        store = CheckpointStore(folder / label.split()[0])
        snap = best_milliseconds(
            lambda: snapshot(
                setup,
                (epochs, 0),
                ForgettingClocks(),
                history,
                EpochSums.zero(setup.device),
                setup.train_loader.state_dict(),
            )
        )
        # As CheckpointStore.save does it: the history table of the last save, extended by one row.
        table_before = history_columns(history[:-1])
        captured = capture(payload)
        cap = best_milliseconds(lambda: capture({**payload, "history": history_columns(history, table_before)}))
        path = folder / label.split()[0] / f"ckpt-e{epochs:06d}-s000000.pt"
        store.folder.mkdir(parents=True, exist_ok=True)
        write = best_milliseconds(lambda: store._write(path, captured))
        size = path.stat().st_size / 2**20

        # Format 1 as it was: the per-layer table as Python rows, everything through torch.save.
        norms = payload["metrics"].get("weight-norms")
        rows = (
            [
                (epoch, layer, *values)
                for epoch, table in zip(norms["epochs"].tolist(), norms["table"].tolist())
                for layer, values in zip(norms["layers"], table)
            ]
            if norms
            else []
        )
        format_1 = {**payload, "metrics": {**payload["metrics"], "weight-norms": {"rows": rows}}}

        def unpacked() -> None:
            with open(folder / "unpacked.pt", "wb") as handle:
                torch.save(format_1, handle)
                handle.flush()
                os.fsync(handle.fileno())

        old = best_milliseconds(unpacked)
        print(f"{label:>14} {snap:9.2f} {cap:9.2f} {write:13.2f} {size:8.2f} {old:20.2f}")


if __name__ == "__main__":
    main()
