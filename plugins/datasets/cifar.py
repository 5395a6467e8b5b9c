"""CIFAR-10 and CIFAR-100 through torchvision's own readers, downloaded only on request (``--download``).

The files are read with ``torchvision.datasets.CIFAR10``/``CIFAR100`` and ``download=False``.
torchvision then verifies the md5 checksum of every batch file and of the meta file, so only
the official release loads; anything else is reported as a one-line ``ConfigError``.

Images stay ``uint8`` ``N x 3 x 32 x 32`` (``pixel_scale=255``): a quarter of the device
memory of float32. The last 10% of a ``data_seed`` permutation of the official training set
(exactly 5,000 images) is the validation split; the official test set is the test split.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from initmem_core.contracts import DatasetBundle
from initmem_core.errors import ConfigError

from .common import apply_train_size, official_split
from .download import fetch

HOMEPAGE = "https://www.cs.toronto.edu/~kriz/cifar.html"
VAL_FRACTION = 0.1

# Per-channel statistics of the official training sets (pixel std, in 0..1 units).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)


def default_root(name: str) -> Path:
    return Path(os.path.expanduser("~")) / ".cache" / "initmem" / name


def resolve_root(config: Any, name: str, base_folder: str) -> Path:
    """``--data-dir`` (or ``~/.cache/initmem/<name>``); the extracted folder itself is accepted too."""
    root = Path(config.data_dir).expanduser() if getattr(config, "data_dir", "") else default_root(name)
    if root.name == base_folder and not (root / base_folder).exists():
        root = root.parent
    return root


def _required_files(dataset_class: Any) -> list[str]:
    return [f for f, _ in dataset_class.train_list + dataset_class.test_list] + [dataset_class.meta["filename"]]


def _read(dataset_class: Any, name: str, root: Path, download: bool = False, given: bool = False) -> tuple[Any, Any]:
    """``given``: ``root`` is the user's --data-dir (the message then suggests no other)."""
    folder = root / dataset_class.base_folder
    archive = root / dataset_class.filename
    missing = [f for f in _required_files(dataset_class) if not (folder / f).is_file()]
    if missing and download and not archive.is_file():
        fetch(dataset_class, root, name, HOMEPAGE)
        missing = [f for f in _required_files(dataset_class) if not (folder / f).is_file()]
    if missing and archive.is_file():  # the official .tar.gz lies there, not yet extracted
        from torchvision.datasets.utils import extract_archive

        try:
            extract_archive(str(archive), str(root))
        except Exception as error:
            raise ConfigError(
                f"{name}: could not extract {archive} ({type(error).__name__}: {error}); "
                f"extract it by hand so that {folder} exists"
            ) from None
        missing = [f for f in _required_files(dataset_class) if not (folder / f).is_file()]
    if missing:
        other = "" if given else " (or pass --data-dir)"  # given: it is where it was looked for
        raise ConfigError(
            f"{name} not found in {root}: put {dataset_class.base_folder} there{other}, "
            f"e.g. extracted from {dataset_class.filename} at {HOMEPAGE}, or pass --download"
        )
    try:
        train = dataset_class(str(root), train=True, download=False)
        test = dataset_class(str(root), train=False, download=False)
    except RuntimeError as error:  # torchvision: "not found or corrupted" = an md5 mismatch here
        raise ConfigError(
            f"{name} files in {folder} fail torchvision's md5 check ({' '.join(str(error).split())}); "
            f"replace them with a fresh copy extracted from {dataset_class.filename} at {HOMEPAGE}"
        ) from None
    return train, test


def _to_tensors(dataset: Any) -> tuple[torch.Tensor, torch.Tensor]:
    # torchvision keeps N x H x W x C uint8 numpy; go back to N x C x H x W.
    images = torch.from_numpy(dataset.data).permute(0, 3, 1, 2).contiguous()
    labels = torch.as_tensor(dataset.targets, dtype=torch.int64)
    return images, labels


def load_cifar(config: Any, name: str) -> DatasetBundle:
    from torchvision.datasets import CIFAR10, CIFAR100

    dataset_class, mean, std, classes = {
        "cifar10": (CIFAR10, CIFAR10_MEAN, CIFAR10_STD, 10),
        "cifar100": (CIFAR100, CIFAR100_MEAN, CIFAR100_STD, 100),
    }[name]
    root = resolve_root(config, name, dataset_class.base_folder)
    given = bool(getattr(config, "data_dir", ""))
    train, test = _read(dataset_class, name, root, bool(getattr(config, "download", False)), given)
    images, labels = _to_tensors(train)
    test_x, test_y = _to_tensors(test)
    # 5,000 of CIFAR's 50,000 for validation
    bundle = official_split(
        name,
        images,
        labels,
        test_x,
        test_y,
        config.data_seed,
        VAL_FRACTION,
        num_classes=classes,
        mean=mean,
        std=std,
        augment_default=True,
        pixel_scale=255.0,
    )
    return apply_train_size(bundle, config)


def load_cifar10(config: Any) -> DatasetBundle:
    return load_cifar(config, "cifar10")


def load_cifar100(config: Any) -> DatasetBundle:
    return load_cifar(config, "cifar100")
