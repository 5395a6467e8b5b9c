"""Built-in dataset plugins: digits, synthetic (and its family), cifar10/cifar100 from local files, and
Fashion-MNIST and MNIST from tiny IDX files written here in the exact on-disk format (big-endian magic
and sizes, then raw bytes), gzipped and not; never downloaded."""

from __future__ import annotations

import gzip
import pickle
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from initmem_cli.app import app
from initmem_core.config import RunConfig
from initmem_core.contracts import DatasetBundle
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.loader import get_registry
from initmem_core.testing.checks import check_dataset
from tests.support import ROOT
from tests.support.dataset_files import TEST, write_cifar10, write_cifar100, write_idx
from tests.support.fresh_imports import assert_imports_none_of

DATASET_NAMES = {"digits", "cifar10", "cifar100", "synthetic", "synthetic:*"}


def build(registry, name: str, **config) -> DatasetBundle:
    return registry.build("dataset", name, config=RunConfig(data=name, **config))


def rows(images: torch.Tensor, labels: torch.Tensor) -> Counter:
    """Multiset of (image bytes, label), to compare splits without caring about order."""
    flat = images.reshape(len(images), -1).numpy()
    return Counter((flat[i].tobytes(), int(labels[i])) for i in range(len(labels)))


def assert_one_line_error(error: pytest.ExceptionInfo, *needles: str) -> None:
    text = str(error.value)
    assert "\n" not in text and text.strip() == text
    for needle in needles:
        assert needle in text, text


# -- registration -------------------------------------------------------------------------------


def test_registers_the_builtin_datasets(registry):
    assert DATASET_NAMES <= set(registry.names("dataset"))
    for name in DATASET_NAMES:
        spec = registry.components["dataset"][name]
        assert isinstance(spec.factory, str) and spec.factory.startswith("initmem_plugins.datasets.")
        assert spec.description


@pytest.mark.slow  # starts a process
def test_registering_datasets_imports_no_torch():
    code = """
        import initmem_plugins.datasets as datasets
        names = []
        datasets.initmem_register_datasets(register=lambda name, factory, description="", **kw: names.append(name))
        print(sorted(names))
    """
    result = assert_imports_none_of(code, "torch", "torchvision", "sklearn", "numpy", timeout=60)
    assert "digits" in result.stdout


@pytest.mark.slow  # starts a process
def test_loading_the_registry_imports_no_torch():
    # The whole built-in registry, as `initmem plugins` loads it: a module-level torch import
    # in any built-in plugin package fails this test (the factories are import strings).
    code = """
        from initmem_core.plugin_system.loader import load_registry
        registry = load_registry(entry_points=False)
        assert "digits" in registry.names("dataset")
    """
    assert_imports_none_of(code, "torch", timeout=60)


# -- digits ---------------------------------------------------------------------------------------


def test_digits_shapes_and_splits(registry):
    from sklearn.datasets import load_digits

    bundle = build(registry, "digits")
    assert bundle.name == "digits" and bundle.num_classes == 10
    assert bundle.sizes() == {"train": 1079, "val": 359, "test": 359}
    for x, y in ((bundle.train_x, bundle.train_y), (bundle.val_x, bundle.val_y), (bundle.test_x, bundle.test_y)):
        assert x.dtype == torch.float32 and x.shape[1:] == (1, 8, 8)
        assert y.dtype == torch.int64 and 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    assert (bundle.in_channels, bundle.image_size) == (1, 8)
    assert bundle.augment_default is False and bundle.pixel_scale == 1.0
    # The three splits partition the 1797 sklearn digits exactly.
    digits = load_digits()
    everything = torch.as_tensor(digits.images, dtype=torch.float32).div(16).unsqueeze(1)
    union = rows(bundle.train_x, bundle.train_y) + rows(bundle.val_x, bundle.val_y) + rows(bundle.test_x, bundle.test_y)
    assert union == rows(everything, torch.as_tensor(digits.target))
    # mean/std are the train split's.
    assert bundle.mean == pytest.approx((float(bundle.train_x.double().mean()),), rel=1e-9)
    assert bundle.std == pytest.approx((float(bundle.train_x.double().std(unbiased=False)),), rel=1e-9)


def test_digits_split_is_fixed_by_data_seed(registry):
    first, again = build(registry, "digits", data_seed=3), build(registry, "digits", data_seed=3)
    other = build(registry, "digits", data_seed=4)
    for field in ("train_x", "train_y", "val_x", "val_y", "test_x", "test_y"):
        assert torch.equal(getattr(first, field), getattr(again, field))
    assert not torch.equal(first.val_x, other.val_x)
    # The run seed does not move the split.
    assert torch.equal(build(registry, "digits", data_seed=3, seed=9).val_y, first.val_y)


def test_train_size_keeps_the_first_examples(registry):
    full = build(registry, "digits")
    small = build(registry, "digits", train_size=100)
    assert small.sizes() == {"train": 100, "val": 359, "test": 359}
    assert torch.equal(small.train_x, full.train_x[:100]) and torch.equal(small.train_y, full.train_y[:100])
    assert torch.equal(small.val_x, full.val_x) and torch.equal(small.test_y, full.test_y)
    assert small.mean == full.mean  # normalisation does not depend on --train-size
    assert build(registry, "synthetic:1x4x4-c3-n50", train_size=7).sizes() == {"train": 7, "val": 12, "test": 12}


def test_train_size_larger_than_the_split_is_a_config_error(registry):
    with pytest.raises(ConfigError) as error:
        build(registry, "digits", train_size=5000)
    assert_one_line_error(error, "--train-size 5000", "1079")


def test_apply_train_size_is_idempotent(registry):
    from initmem_plugins.datasets.common import apply_train_size

    config = RunConfig(train_size=10)
    once = build(registry, "synthetic:1x4x4-c2-n40", train_size=10)
    assert apply_train_size(once, config) is once


# -- synthetic -------------------------------------------------------------------------------------


def test_synthetic_default(registry):
    bundle = build(registry, "synthetic")
    assert bundle.sizes() == {"train": 1024, "val": 256, "test": 256}
    assert bundle.train_x.shape == (1024, 3, 32, 32) and bundle.train_x.dtype == torch.float32
    assert bundle.num_classes == 10 and bundle.augment_default is False and bundle.pixel_scale == 1.0
    assert 0.0 <= float(bundle.train_x.min()) and float(bundle.train_x.max()) <= 1.0
    assert bundle.train_y.dtype == torch.int64
    assert torch.bincount(bundle.train_y, minlength=10).tolist() == [103] * 4 + [102] * 6  # balanced
    assert len(bundle.mean) == len(bundle.std) == 3


@pytest.mark.parametrize(
    ("variant", "shape", "classes", "sizes"),
    [
        ("1x8x8-c4-n200", (1, 8, 8), 4, (200, 50, 50)),
        ("3x32x32", (3, 32, 32), 10, (1024, 256, 256)),
        ("2x5x7-c3", (2, 5, 7), 3, (1024, 256, 256)),
        ("1x6x6-n10", (1, 6, 6), 10, (10, 2, 2)),
        ("1x2x2-c2-n1", (1, 2, 2), 2, (1, 1, 1)),
    ],
)
def test_synthetic_variants(registry, variant, shape, classes, sizes):
    bundle = build(registry, f"synthetic:{variant}")
    assert bundle.name == f"synthetic:{variant}"
    assert bundle.train_x.shape[1:] == shape and bundle.num_classes == classes
    assert tuple(bundle.sizes().values()) == sizes
    assert int(bundle.train_y.max()) < classes


@pytest.mark.parametrize(
    "variant",
    [
        "abc",
        "1x8",
        "1x8x8x8",
        "1x8x8-c4-n200-",
        "1x8x8-n200-c4",
        "1x8x8-k4",
        "1X8X8",
        " 1x8x8",
        "1x8x8-c-n5",
        "0x8x8",
        "1x0x8",
        "1x8x8-c1",
        "1x8x8-c0",
        "1x8x8-n0",
        "-1x8x8",
        "1.5x8x8",
        "3x100000x100000",
    ],
)
def test_bad_synthetic_variant_is_a_config_error(registry, variant):
    with pytest.raises(ConfigError) as error:
        build(registry, f"synthetic:{variant}")
    assert_one_line_error(error, f"synthetic:{variant}")


def test_synthetic_is_fixed_by_data_seed(registry):
    first, again = build(registry, "synthetic:1x8x8-c4-n64"), build(registry, "synthetic:1x8x8-c4-n64")
    other = build(registry, "synthetic:1x8x8-c4-n64", data_seed=1)
    assert torch.equal(first.train_x, again.train_x) and torch.equal(first.test_y, again.test_y)
    assert not torch.equal(first.train_x, other.train_x)


def test_synthetic_labels_are_learnable(registry):
    # Nearest class mean, fit on train, must do far better than chance (25%) on val.
    bundle = build(registry, "synthetic:1x8x8-c4-n200")
    flat = bundle.train_x.flatten(1)
    means = torch.stack([flat[bundle.train_y == k].mean(0) for k in range(4)])
    predicted = torch.cdist(bundle.val_x.flatten(1), means).argmin(1)
    assert (predicted == bundle.val_y).float().mean() > 0.9


# -- cifar10 / cifar100 from files in the official on-disk format (tests/support/dataset_files.py) --


@pytest.fixture
def skip_md5(monkeypatch):
    """torchvision's CIFAR readers md5-check every file even with download=False; our small fakes
    cannot match, so for these tests the check is reduced to "the file exists"."""
    import torchvision.datasets.cifar as tv_cifar

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda path, md5=None: Path(path).is_file())


def test_fake_files_have_the_official_pickle_layout(tmp_path):
    write_cifar10(tmp_path)
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_1", "rb") as handle:
        batch = pickle.load(handle, encoding="bytes")  # the recipe on the CIFAR page
    assert batch[b"data"].dtype == np.uint8 and batch[b"data"].shape == (20, 3072)
    assert len(batch[b"labels"]) == 20


def _traced(images: torch.Tensor) -> list[int]:
    """The ids written into the first two pixels by write_cifar10 and write_cifar100."""
    return (images[:, 0, 0, 0].long() + 256 * images[:, 0, 0, 1].long()).tolist()


def test_cifar10_from_official_layout(registry, tmp_path, skip_md5):
    original = write_cifar10(tmp_path)
    bundle = build(registry, "cifar10", data_dir=str(tmp_path))
    assert bundle.sizes() == {"train": 90, "val": 10, "test": 30}  # last 10% of the permutation is val
    assert bundle.train_x.dtype == torch.uint8 and bundle.train_x.shape[1:] == (3, 32, 32)
    assert bundle.train_y.dtype == torch.int64 and bundle.num_classes == 10
    assert bundle.pixel_scale == 255 and bundle.augment_default is True
    assert bundle.mean == (0.4914, 0.4822, 0.4465) and bundle.std == (0.2470, 0.2435, 0.2616)
    # Every image is the official row reshaped to C x H x W, with its own label.
    expected_x = torch.from_numpy(original["train_x"]).reshape(-1, 3, 32, 32)
    expected_y = torch.tensor(original["train_y"])
    for x, y in ((bundle.train_x, bundle.train_y), (bundle.val_x, bundle.val_y)):
        ids = _traced(x)
        assert torch.equal(x, expected_x[ids]) and torch.equal(y, expected_y[ids])
    assert sorted(_traced(bundle.train_x) + _traced(bundle.val_x)) == list(range(100))
    # The official test set, in its order.
    assert torch.equal(bundle.test_x, torch.from_numpy(original["test_x"]).reshape(-1, 3, 32, 32))
    assert bundle.test_y.tolist() == original["test_y"]


def test_cifar10_split_is_fixed_by_data_seed(registry, tmp_path, skip_md5):
    write_cifar10(tmp_path)
    first = build(registry, "cifar10", data_dir=str(tmp_path), data_seed=5)
    again = build(registry, "cifar10", data_dir=str(tmp_path), data_seed=5, seed=3)
    other = build(registry, "cifar10", data_dir=str(tmp_path), data_seed=6)
    assert _traced(first.val_x) == _traced(again.val_x) != _traced(other.val_x)
    assert build(registry, "cifar10", data_dir=str(tmp_path), train_size=25).sizes()["train"] == 25


def test_cifar_validation_is_exactly_5000_of_50000():
    from initmem_plugins.datasets import cifar

    assert int(round(50_000 * cifar.VAL_FRACTION)) == 5_000


def test_cifar10_accepts_the_extracted_folder_and_the_archive(registry, tmp_path, skip_md5):
    write_cifar10(tmp_path / "a")
    direct = build(registry, "cifar10", data_dir=str(tmp_path / "a" / "cifar-10-batches-py"))
    assert direct.sizes()["train"] == 90
    # Only the official .tar.gz in --data-dir: it is extracted in place.
    archive_root = tmp_path / "b"
    archive_root.mkdir()
    with tarfile.open(archive_root / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "a" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    assert build(registry, "cifar10", data_dir=str(archive_root)).sizes() == direct.sizes()


def test_cifar100_from_official_layout(registry, tmp_path, skip_md5):
    original = write_cifar100(tmp_path)
    bundle = build(registry, "cifar100", data_dir=str(tmp_path))
    assert bundle.sizes() == {"train": 54, "val": 6, "test": 20}
    assert bundle.num_classes == 100 and bundle.train_x.dtype == torch.uint8
    data, fine = original["train"]
    ids = _traced(bundle.train_x)
    assert torch.equal(bundle.train_x, torch.from_numpy(data).reshape(-1, 3, 32, 32)[ids])
    assert bundle.train_y.tolist() == [fine[i] for i in ids]  # fine labels, not coarse
    assert bundle.test_y.tolist() == original["test"][1]


@pytest.mark.parametrize(("name", "folder"), [("cifar10", "cifar-10-batches-py"), ("cifar100", "cifar-100-python")])
def test_missing_cifar_is_a_one_line_config_error(registry, tmp_path, name, folder):
    with pytest.raises(ConfigError) as error:
        build(registry, name, data_dir=str(tmp_path / "nowhere"))
    assert_one_line_error(
        error,
        f"{name} not found in {tmp_path / 'nowhere'}",
        folder,
        "https://www.cs.toronto.edu/~kriz/cifar.html",
    )
    assert "--data-dir" not in str(error.value)  # it was given: the folder named is where it looked


def test_missing_cifar_names_the_default_folder(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError) as error:
        build(registry, "cifar10")
    assert_one_line_error(error, str(tmp_path / ".cache" / "initmem" / "cifar10"), "(or pass --data-dir)")


def test_incomplete_cifar_is_a_config_error(registry, tmp_path):
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(ConfigError) as error:
        build(registry, "cifar10", data_dir=str(tmp_path))
    assert_one_line_error(error, "not found")


def test_cifar_files_failing_the_md5_check_are_a_config_error(registry, tmp_path):
    # No skip_md5 here: torchvision verifies the checksums and our fakes are not the release.
    write_cifar10(tmp_path)
    with pytest.raises(ConfigError) as error:
        build(registry, "cifar10", data_dir=str(tmp_path))
    assert_one_line_error(error, "md5", "cifar-10-python.tar.gz")


# -- Fashion-MNIST and MNIST (IDX files, tests/support/dataset_files.py) --------------------------


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


# Where the real Fashion-MNIST lies: shared/ beside the repository (CI), or this machine's copy.
REAL_FASHION_MNIST = next(
    (
        folder
        for folder in (
            ROOT.parent / "shared/data/fashion-mnist",
            Path("/work/shared/data/fashion-mnist"),
        )
        if (folder / "t10k-labels-idx1-ubyte.gz").is_file()
    ),
    None,
)


@pytest.mark.skipif(REAL_FASHION_MNIST is None, reason="no Fashion-MNIST here")
def test_mnist_asked_of_a_fashion_mnist_folder_is_refused_in_one_line_and_nothing_is_tracked(tmp_path, store_in):
    uri = store_in(tmp_path)
    before = (tmp_path / "mlflow.db").read_bytes()
    args = ["run", "--data", "mnist", "--data-dir", str(REAL_FASHION_MNIST), "--tracking-uri", uri, "--epochs", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert f"--data mnist: {REAL_FASHION_MNIST} holds fashion-mnist's files (" in result.stderr
    assert "matches fashion-mnist's checksum), not mnist's; pass --data fashion-mnist" in result.stderr
    assert (tmp_path / "mlflow.db").read_bytes() == before  # no run, no experiment written
    # the same folder as Fashion-MNIST is recognised (its .gz by their content: Debian's gzip differs)
    from initmem_core.training.plan import plan_run

    plan_run(RunConfig(data="fashion-mnist", data_dir=str(REAL_FASHION_MNIST)), get_registry())


def test_the_declared_checksums_are_torchvisions():
    from torchvision import datasets

    declared = {
        name: dict(get_registry().lookup("dataset", name)[0].info.files)
        for name in ("mnist", "fashion-mnist", "cifar10", "cifar100")
    }
    assert dict(datasets.MNIST.resources).items() <= declared["mnist"].items()
    assert dict(datasets.FashionMNIST.resources).items() <= declared["fashion-mnist"].items()
    for name, dataset_class in (("cifar10", datasets.CIFAR10), ("cifar100", datasets.CIFAR100)):
        listed = {f: md5 for f, md5 in dataset_class.train_list + dataset_class.test_list}
        listed[dataset_class.meta["filename"]] = dataset_class.meta["md5"]
        listed[dataset_class.filename] = dataset_class.tgz_md5
        assert listed == declared[name]


def test_a_third_party_dataset_is_recognised_by_the_files_it_declares(tmp_path):
    """Files of another dataset (plain, gzipped, in a subfolder) refused; stand-ins matching no
    declared checksum and the wanted dataset's own files accepted."""
    import hashlib

    from initmem_core.contracts import DatasetInfo
    from initmem_core.plugin_system.registry import ComponentSpec, Provider
    from initmem_core.training.data_files import check_data_dir

    def spec(name: str, content: bytes) -> ComponentSpec:
        files = (("images.bin", hashlib.md5(content).hexdigest()),)
        return ComponentSpec("dataset", name, "x:y", "", Provider("p", "p", "1"), info=DatasetInfo(files=files))

    datasets = {"ours": spec("ours", b"ours"), "theirs": spec("theirs", b"theirs")}
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "images.bin.gz").write_bytes(gzip.compress(b"theirs"))
    with pytest.raises(
        ConfigError,
        match=r"^--data ours: .* holds theirs.s files \(sub/images.bin.gz matches theirs.s checksum\), not ours.s",
    ) as error:
        check_data_dir("ours", str(tmp_path), datasets)
    assert "\n" not in str(error.value)
    check_data_dir("theirs", str(tmp_path), datasets)  # its own
    (tmp_path / "sub" / "images.bin.gz").write_bytes(gzip.compress(b"a stand-in"))
    check_data_dir("ours", str(tmp_path), datasets)  # unrecognised: taken as it is
    (tmp_path / "images.bin").write_bytes(b"ours")
    (tmp_path / "sub" / "images.bin.gz").write_bytes(gzip.compress(b"theirs"))
    check_data_dir("ours", str(tmp_path), datasets)  # its own lie there too (torchvision's layout holds several)
