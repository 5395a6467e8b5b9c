"""Fashion-MNIST and MNIST from their IDX files, read by torchvision's own classes, downloaded only
on request (``--download``: into ``--data-dir`` or ``~/.cache/initmem/<dataset>``, torchvision's layout).

The four standard files (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each plain or ``.gz``) are looked for in
``--data-dir`` when given, else in ``~/.cache/initmem/<dataset>`` and, for Fashion-MNIST, where the
Debian package ``dataset-fashion-mnist`` installed them (``dpkg -L``). In each folder they may lie
directly, or in torchvision's layout ``<Class>/raw/``. torchvision reads only uncompressed files
from its layout, so they are linked (or decompressed) into a temporary folder in that layout and
read with ``torchvision.datasets.FashionMNIST``/``MNIST`` and ``download=False``.

Images stay ``uint8`` ``N x 1 x 28 x 28`` (``pixel_scale=255``). The last 10% of a ``data_seed``
permutation of the official training set (6,000 images) is the validation split; the official
test set is the test split. ``--train-size`` keeps the first N of the permuted training split, a
seeded subset; ``--eval-size`` caps validation and test.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch

from initmem_core.contracts import DatasetBundle
from initmem_core.errors import ConfigError

from .cifar import default_root
from .common import apply_train_size, official_split
from .download import fetch

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
VAL_FRACTION = 0.1

# name -> (torchvision class name, per-channel mean and std of the official training set, homepage, Debian package)
DATASETS = {
    "fashion-mnist": (
        "FashionMNIST",
        (0.2860,),
        (0.3530,),
        "https://github.com/zalandoresearch/fashion-mnist",
        "dataset-fashion-mnist",
    ),
    "mnist": ("MNIST", (0.1307,), (0.3081,), "https://yann.lecun.com/exdb/mnist/", None),
}


def debian_folders(package: str | None) -> list[Path]:
    """Folders holding the files of ``package``, when dpkg knows it (nothing otherwise)."""
    if not package or shutil.which("dpkg") is None:
        return []
    try:
        listing = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    found = {Path(line).parent for line in listing.stdout.splitlines() if Path(line).name.removesuffix(".gz") in FILES}
    return sorted(found)


def _located(folder: Path) -> dict[str, Path] | None:
    """Each file of ``FILES`` in ``folder`` (plain preferred over ``.gz``), or ``None`` if any is missing."""
    paths = {}
    for name in FILES:
        plain, packed = folder / name, folder / f"{name}.gz"
        path = plain if plain.is_file() else packed if packed.is_file() else None
        if path is None:
            return None
        paths[name] = path
    return paths


def find_files(config: Any, name: str) -> dict[str, Path]:
    class_name, _, _, homepage, package = DATASETS[name]
    given = getattr(config, "data_dir", "")
    bases = [Path(given).expanduser()] if given else [default_root(name), *debian_folders(package)]
    for base in bases:
        for folder in (base, base / class_name / "raw", base / "raw"):
            located = _located(folder)
            if located:
                return located
    if getattr(config, "download", False):
        from torchvision import datasets

        fetch(getattr(datasets, class_name), bases[0], name, homepage)
        located = _located(bases[0] / class_name / "raw")
        if located:
            return located
    where = " or ".join(str(b) for b in bases)
    other = "" if given else " (or pass --data-dir)"  # given: it is where they were looked for
    raise ConfigError(
        f"{name} not found in {where}: put {', '.join(FILES)} (each plain or .gz) there{other}, "
        f"e.g. downloaded from {homepage}, or pass --download"
    )


def _read(name: str, files: dict[str, Path]) -> tuple[Any, Any]:
    from torchvision import datasets

    class_name = DATASETS[name][0]
    with tempfile.TemporaryDirectory(prefix="initmem-idx-") as root:
        raw = Path(root) / class_name / "raw"
        raw.mkdir(parents=True)
        for file, source in files.items():
            if source.suffix == ".gz":  # torchvision reads only uncompressed files from its layout
                with gzip.open(source, "rb") as packed, open(raw / file, "wb") as out:
                    shutil.copyfileobj(packed, out)
            else:
                os.symlink(source.resolve(), raw / file)
        dataset_class = getattr(datasets, class_name)
        try:
            # The classes read everything into tensors here, before the folder goes away.
            return (dataset_class(root, train=True, download=False), dataset_class(root, train=False, download=False))
        except Exception as error:  # a truncated or foreign file: torchvision asserts or raises
            message = " ".join(str(error).split()) or type(error).__name__
            folder = next(iter(files.values())).parent
            raise ConfigError(
                f"{name} files in {folder} cannot be read as IDX ({message}); "
                f"replace them with the official files from {DATASETS[name][3]}"
            ) from None


def load_idx_dataset(config: Any, name: str) -> DatasetBundle:
    _, mean, std, _, _ = DATASETS[name]
    train, test = _read(name, find_files(config, name))
    # 6,000 of the official 60,000 for validation
    bundle = official_split(
        name,
        train.data.unsqueeze(1).contiguous(),
        train.targets.to(torch.int64),
        test.data.unsqueeze(1).contiguous(),
        test.targets.to(torch.int64),
        config.data_seed,
        VAL_FRACTION,
        num_classes=10,
        mean=mean,
        std=std,
        augment_default=False,
        pixel_scale=255.0,
    )
    return apply_train_size(bundle, config)


def load_fashion_mnist(config: Any) -> DatasetBundle:
    return load_idx_dataset(config, "fashion-mnist")


def load_mnist(config: Any) -> DatasetBundle:
    return load_idx_dataset(config, "mnist")
