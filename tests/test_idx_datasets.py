"""Fashion-MNIST and MNIST from tiny IDX files written here in the exact on-disk format (big-endian
magic and sizes, then raw bytes), gzipped and not; never downloaded."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.config import RunConfig
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.loader import get_registry
from initmem_core.testing.checks import check_dataset

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


def load(name: str, folder: Path, **config):
    return get_registry().build("dataset", name, config=RunConfig(data=name, data_dir=str(folder), **config))


@pytest.mark.parametrize("gzipped", [True, False])
@pytest.mark.parametrize("name", ["fashion-mnist", "mnist"])
def test_reads_the_idx_files_plain_or_gzipped(tmp_path, name, gzipped):
    data = write_idx(tmp_path, gzipped)
    bundle = load(name, tmp_path)
    assert bundle.sizes() == {"train": 36, "val": 4, "test": TEST}  # the last 10% of the permutation is val
    assert bundle.train_x.dtype == torch.uint8 and bundle.train_x.shape[1:] == (1, 28, 28)
    assert torch.equal(bundle.test_x[:, 0], data["t10k-images-idx3-ubyte"].to(torch.uint8))
    assert torch.equal(bundle.test_y, data["t10k-labels-idx1-ubyte"])
    # train and val together are the official training set, each image with its own label
    images = torch.cat([bundle.train_x, bundle.val_x])[:, 0]
    labels = torch.cat([bundle.train_y, bundle.val_y])
    order = labels.argsort(stable=True)
    expected = data["train-images-idx3-ubyte"].to(torch.uint8)
    for image, label in zip(images, labels):
        assert any(torch.equal(image, e) for e in expected[data["train-labels-idx1-ubyte"] == label])
    assert sorted(labels[order].tolist()) == sorted(data["train-labels-idx1-ubyte"].tolist())


def test_torchvision_layout_and_the_dataset_contract(tmp_path):
    write_idx(tmp_path / "FashionMNIST" / "raw", gzipped=False)
    assert load("fashion-mnist", tmp_path).sizes()["test"] == TEST
    # check_dataset needs every class in the training split: 40 labels cycle through all 10
    check_dataset("fashion-mnist", data_dir=str(tmp_path), train_size=0)


def test_missing_files_are_the_same_one_line_error_as_cifar(tmp_path):
    write_idx(tmp_path, gzipped=True)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(ConfigError, match=rf"fashion-mnist not found in {tmp_path}: put .* there, e.g. ") as error:
        load("fashion-mnist", tmp_path)
    assert "--data-dir" not in str(error.value)  # it was given: the folder named is where it looked
    result = CliRunner().invoke(app, ["run", "--data", "mnist", "--data-dir", str(tmp_path / "none"), "--no-tracking"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert "mnist not found in" in result.stderr


def test_a_corrupt_file_is_one_line(tmp_path):
    write_idx(tmp_path, gzipped=False)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03" + b"\x00" * 5)
    with pytest.raises(ConfigError, match="cannot be read as IDX") as error:
        load("fashion-mnist", tmp_path)
    assert "\n" not in str(error.value)


def test_debian_folder_is_found_through_dpkg(tmp_path, monkeypatch):
    from initmem_plugins.datasets import mnist

    write_idx(tmp_path / "usr-share", gzipped=True)
    monkeypatch.setattr(mnist, "default_root", lambda name: tmp_path / "empty-cache")
    monkeypatch.setattr(mnist, "debian_folders", lambda package: [tmp_path / "usr-share"] if package else [])
    assert load("fashion-mnist", "").sizes()["train"] == 36


def test_eval_size_keeps_a_data_seeded_subset_of_val_and_test(tmp_path):
    from initmem_core import run

    write_idx(tmp_path, gzipped=True)
    result = run(
        data="mnist",
        data_dir=str(tmp_path),
        eval_size=5,
        arch="resnet20",
        epochs=1,
        batch_size=36,
        threads=1,
        tracking=False,
        checkpoint_every=0,
    )
    assert result.history[-1]["test_acc"] * 5 == pytest.approx(round(result.history[-1]["test_acc"] * 5))
