"""scikit-learn's bundled handwritten digits: 1797 images, 1x8x8, 10 classes, no download."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy
import torch

from initmem_core.contracts import DatasetBundle

from .common import apply_train_size, channel_stats, split_permutation

VAL_FRACTION = 0.2
TEST_FRACTION = 0.2


def load_digits_dataset(config: Any) -> DatasetBundle:
    """60% train / 20% val / 20% test of a permutation fixed by ``config.data_seed``.

    Images are float32 in 0..1 (pixel value / 16), ``N x 1 x 8 x 8``; mean/std come from the
    training split.
    """
    pixels, target = read_digits()
    images = torch.as_tensor(pixels, dtype=torch.float32).div_(16.0).reshape(-1, 1, 8, 8).contiguous()
    labels = torch.as_tensor(target, dtype=torch.int64)
    n = len(labels)
    n_val, n_test = int(n * VAL_FRACTION), int(n * TEST_FRACTION)
    order = split_permutation(n, config.data_seed)
    train_idx = order[: n - n_val - n_test]
    val_idx = order[n - n_val - n_test : n - n_test]
    test_idx = order[n - n_test :]
    mean, std = channel_stats(images[train_idx])
    bundle = DatasetBundle(
        name="digits",
        train_x=images[train_idx],
        train_y=labels[train_idx],
        val_x=images[val_idx],
        val_y=labels[val_idx],
        test_x=images[test_idx],
        test_y=labels[test_idx],
        num_classes=10,
        mean=mean,
        std=std,
        augment_default=False,
        pixel_scale=1.0,
        reads_files=False,  # bundled with scikit-learn
    )
    return apply_train_size(bundle, config)


def digits_file() -> Path:
    """scikit-learn's ``datasets/data/digits.csv.gz``, found without importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("the digits dataset comes with scikit-learn: pip install scikit-learn")
    return Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"


def read_digits() -> tuple[numpy.ndarray, numpy.ndarray]:
    """The 1797 images as rows of 64 pixel values (0..16) and their labels, read as
    ``sklearn.datasets.load_digits`` reads them: importing scikit-learn (and SciPy, which it pulls
    in) costs each run's process about 2 s of CPU, the file a few milliseconds."""
    data = numpy.loadtxt(digits_file(), delimiter=",")
    return data[:, :-1], data[:, -1].astype(int, copy=False)
