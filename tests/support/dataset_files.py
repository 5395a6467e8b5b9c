"""Dataset files written here in their official on-disk formats, small and never downloaded: CIFAR-10
and CIFAR-100's Python 2 pickles (``write_cifar10``, ``write_cifar100``; each image's first pixels
hold its row number, so that rows can be traced) and the IDX files of MNIST and Fashion-MNIST
(``write_idx``, ``TRAIN`` training and ``TEST`` test images), gzipped or not."""

from __future__ import annotations

import gzip
import io
import pickle
import struct
from pathlib import Path

import numpy as np
import torch


class _Py2Pickler(pickle._Pickler):
    """Writes ``bytes`` as Python 2 ``str`` (BINSTRING), as the official CIFAR pickles do.

    The official files are Python 2 protocol-2 pickles whose keys are ``str``: they load as
    ``b'data'`` with ``encoding='bytes'`` (the dataset page's recipe) and as ``'data'`` with
    ``encoding='latin1'`` (torchvision's), and the numpy array's buffer is a ``str`` too.
    """

    dispatch = pickle._Pickler.dispatch.copy()

    def _save_py2_str(self, obj):
        n = len(obj)
        self.write(
            pickle.SHORT_BINSTRING + bytes([n]) + obj if n < 256 else pickle.BINSTRING + struct.pack("<i", n) + obj
        )
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str


def _dump_py2(path: Path, obj) -> None:
    buffer = io.BytesIO()
    _Py2Pickler(buffer, protocol=2).dump(obj)
    path.write_bytes(buffer.getvalue())


def _fake_images(n: int, offset: int, rng: np.random.Generator) -> np.ndarray:
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    data[:, 0] = np.arange(offset, offset + n) % 256  # first red pixel: an id, so rows can be traced
    data[:, 1] = np.arange(offset, offset + n) // 256
    return data


def write_cifar10(root: Path, per_batch: int = 20, n_test: int = 30) -> dict:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    train_data, train_labels = [], []
    for i in range(1, 6):
        data = _fake_images(per_batch, (i - 1) * per_batch, rng)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        _dump_py2(
            folder / f"data_batch_{i}",
            {
                b"batch_label": f"training batch {i} of 5".encode(),
                b"labels": labels,
                b"data": data,
                b"filenames": [f"img_{i}_{j}.png".encode() for j in range(per_batch)],
            },
        )
        train_data.append(data)
        train_labels += labels
    test_data = _fake_images(n_test, 10_000, rng)
    test_labels = [int(v) for v in rng.integers(0, 10, n_test)]
    _dump_py2(
        folder / "test_batch",
        {
            b"batch_label": b"testing batch 1 of 1",
            b"labels": test_labels,
            b"data": test_data,
            b"filenames": [b"t.png"] * n_test,
        },
    )
    _dump_py2(
        folder / "batches.meta",
        {
            b"num_cases_per_batch": per_batch,
            b"num_vis": 3072,
            b"label_names": [f"class{k}".encode() for k in range(10)],
        },
    )
    return {"train_x": np.concatenate(train_data), "train_y": train_labels, "test_x": test_data, "test_y": test_labels}


def write_cifar100(root: Path, n_train: int = 60, n_test: int = 20) -> dict:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    arrays = {}
    for split, n, offset in (("train", n_train, 0), ("test", n_test, 10_000)):
        data = _fake_images(n, offset, rng)
        fine = [int(v) for v in rng.integers(0, 100, n)]
        _dump_py2(
            folder / split,
            {
                b"filenames": [b"x.png"] * n,
                b"batch_label": split.encode(),
                b"fine_labels": fine,
                b"coarse_labels": [f // 5 for f in fine],
                b"data": data,
            },
        )
        arrays[split] = (data, fine)
    _dump_py2(
        folder / "meta",
        {
            b"fine_label_names": [f"f{k}".encode() for k in range(100)],
            b"coarse_label_names": [f"c{k}".encode() for k in range(20)],
        },
    )
    return arrays


TRAIN, TEST = 40, 12


def idx_images(images: torch.Tensor) -> bytes:
    n, rows, cols = images.shape
    return struct.pack(">IIII", 0x00000803, n, rows, cols) + images.to(torch.uint8).numpy().tobytes()


def idx_labels(labels: torch.Tensor) -> bytes:
    return struct.pack(">II", 0x00000801, len(labels)) + labels.to(torch.uint8).numpy().tobytes()


def write_idx(folder: Path, gzipped: bool) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    data = {
        "train-images-idx3-ubyte": torch.randint(0, 256, (TRAIN, 28, 28), generator=generator),
        "train-labels-idx1-ubyte": torch.arange(TRAIN) % 10,
        "t10k-images-idx3-ubyte": torch.randint(0, 256, (TEST, 28, 28), generator=generator),
        "t10k-labels-idx1-ubyte": (torch.arange(TEST) * 3) % 10,
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, tensor in data.items():
        payload = idx_images(tensor) if tensor.ndim == 3 else idx_labels(tensor)
        if gzipped:
            (folder / f"{name}.gz").write_bytes(gzip.compress(payload))
        else:
            (folder / name).write_bytes(payload)
    return data
