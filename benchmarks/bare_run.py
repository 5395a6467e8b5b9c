"""The bare-script baseline of benchmarks/whole_process.py: one run as a user would hand-write it.

Plain PyTorch and scikit-learn only (the CIFAR ResNet-20 class is taken from initmem's built-in
plugin so both sides train the very same network): digits, a 60/20/20 split, SGD at a constant
rate, batch 32, and before training and after every epoch the evaluations an initmem run makes
(clean training set, validation and test, in eval mode, large batches). No tracking, no checkpoints, no progress bar.

    python -m benchmarks.bare_run --epochs 10 --sigma 1.0 --seed 0
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

from initmem_plugins.architectures.cifar_resnet import build_resnet20
from initmem_plugins.datasets.digits import read_digits  # scikit-learn's file, without importing scikit-learn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--fast-exit",
        action="store_true",
        help="end as `initmem` does after training: flush, exit handlers, no interpreter teardown",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    pixels, target = read_digits()
    x = torch.as_tensor(pixels, dtype=torch.float32).div_(16.0).reshape(-1, 1, 8, 8)
    y = torch.as_tensor(target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    n_hold = int(0.2 * len(y))
    splits = {
        "train": order[: len(y) - 2 * n_hold],
        "val": order[len(y) - 2 * n_hold : len(y) - n_hold],
        "test": order[len(y) - n_hold :],
    }
    mean, std = x[splits["train"]].mean(), x[splits["train"]].std()
    data = {name: ((x[idx] - mean) / std, y[idx]) for name, idx in splits.items()}

    model = build_resnet20(in_channels=1, num_classes=10, image_size=8)
    with torch.no_grad():  # sigma x N(0, 1/fan_in) kernels, as initmem's fan-in initializer
        for module in model.modules():
            if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                module.weight.normal_(0.0, args.sigma / math.sqrt(module.weight[0].numel()))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    @torch.no_grad()
    def evaluate(name: str) -> tuple[float, float]:
        model.eval()
        images, labels = data[name]
        logits = torch.cat([model(images[i : i + 1024]) for i in range(0, len(labels), 1024)])
        model.train()
        return F.cross_entropy(logits, labels).item(), (logits.argmax(1) == labels).float().mean().item()

    train_x, train_y = data["train"]
    shuffle = torch.Generator().manual_seed(args.seed)
    for epoch in range(0, args.epochs + 1):  # epoch 0: the initialization, evaluated as an initmem run does
        for idx in torch.randperm(len(train_y), generator=shuffle).split(args.batch_size) if epoch else ():
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        figures = {name: evaluate(name) for name in ("train", "val", "test")}
        print(f"epoch {epoch}: " + "  ".join(f"{name} acc {acc:.3f}" for name, (_, acc) in figures.items()))
    if args.fast_exit:
        import atexit
        import os
        import sys

        atexit._run_exitfuncs()
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
