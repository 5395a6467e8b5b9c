"""Built-in datasets.

Registering imports nothing heavy: every factory is an import string, resolved only when a run
builds its dataset. Each factory returns an ``initmem_core.contracts.DatasetBundle`` whose training
split is already cut to ``--train-size`` (see ``initmem_plugins.datasets.common``).
"""

from __future__ import annotations

from initmem_core import hookimpl

_HERE = "initmem_plugins.datasets"


@hookimpl
def initmem_register_datasets(register):
    register(
        "digits",
        f"{_HERE}.digits:load_digits_dataset",
        "scikit-learn handwritten digits, 1x8x8, 10 classes, 60/20/20 split (no download)",
        shape=(1, 8, 8),
        classes=10,
        splits=(1079, 359, 359),  # of 1797: 20% (rounded down) each for validation and test
    )
    register(
        "cifar10",
        f"{_HERE}.cifar:load_cifar10",
        "CIFAR-10 from --data-dir, 3x32x32, 10 classes, 45k/5k train/val split + official test set",
        shape=(3, 32, 32),
        classes=10,
        splits=(45_000, 5_000, 10_000),
    )
    register(
        "cifar100",
        f"{_HERE}.cifar:load_cifar100",
        "CIFAR-100 (fine labels) from --data-dir, 3x32x32, 100 classes, 45k/5k train/val split + official test set",
        shape=(3, 32, 32),
        classes=100,
        splits=(45_000, 5_000, 10_000),
    )
    register(
        "fashion-mnist",
        f"{_HERE}.mnist:load_fashion_mnist",
        "Fashion-MNIST from IDX files (--data-dir, ~/.cache/initmem/fashion-mnist or Debian's "
        "dataset-fashion-mnist), 1x28x28, 54k/6k train/val split + official test set",
        shape=(1, 28, 28),
        classes=10,
        splits=(54_000, 6_000, 10_000),
    )
    register(
        "mnist",
        f"{_HERE}.mnist:load_mnist",
        "MNIST from IDX files (--data-dir or ~/.cache/initmem/mnist), 1x28x28, "
        "54k/6k train/val split + official test set",
        shape=(1, 28, 28),
        classes=10,
        splits=(54_000, 6_000, 10_000),
    )
    register(
        "synthetic",
        f"{_HERE}.synthetic:load_synthetic",
        "Generated learnable images, 3x32x32, 10 classes, 1024/256/256 (tests, benchmarks)",
        shape=(3, 32, 32),
        classes=10,
        splits=(1024, 256, 256),
    )
    register(
        "synthetic:*",
        f"{_HERE}.synthetic:load_synthetic_variant",
        "Generated images sized by the variant CxHxW[-cK][-nN], e.g. synthetic:1x8x8-c4-n200",
    )
