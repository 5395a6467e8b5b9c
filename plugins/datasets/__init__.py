"""Built-in datasets.

Registering imports nothing heavy: every factory is an import string, resolved only when a run
builds its dataset. Each factory returns an ``initmem_core.contracts.DatasetBundle`` whose training
split is already cut to ``--train-size`` (see ``initmem_plugins.datasets.common``).
"""

from __future__ import annotations

from initmem_core import hookimpl

_HERE = "initmem_plugins.datasets"

# The files that recognise each dataset (contracts.DatasetInfo.files): the md5 checksums
# torchvision's classes list (MNIST.resources, FashionMNIST.resources: the .gz files;
# CIFAR10/CIFAR100: train_list, test_list, meta, the archive), and for the IDX files that a
# loader also reads uncompressed, the md5 of their content (of the official files).
IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
MNIST_FILES = (
    *zip(
        [f"{name}.gz" for name in IDX],
        [
            "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "d53e105ee54ea40749a09fcbcd1e9432",
            "9fb629c4189551a2d022fa330f9573f3",
            "ec29112dd5afa0611ce80d1b7f02629c",
        ],
    ),
    *zip(
        IDX,
        [
            "6bbc9ace898e44ae57da46a324031adb",
            "a25bea736e30d166cdddb491f175f624",
            "2646ac647ad5339dbf082846283269ea",
            "27ae3e4e09519cfbb04c329615203637",
        ],
    ),
)
FASHION_MNIST_FILES = (
    *zip(
        [f"{name}.gz" for name in IDX],
        [
            "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
            "25c81989df183df01b3e8a0aad5dffbe",
            "bef4ecab320f06d8554ea6380940ec79",
            "bb300cfdad3c16e7a12a480ee83cd310",
        ],
    ),
    *zip(
        IDX,
        [
            "f4a8712d7a061bf5bd6d2ca38dc4d50a",
            "9018921c3c673c538a1fc5bad174d6f9",
            "8181f5470baa50b63fa0f6fddb340f0a",
            "15d484375f8d13e6eb1aabb0c3f46965",
        ],
    ),
)
CIFAR10_FILES = (
    ("data_batch_1", "c99cafc152244af753f735de768cd75f"),
    ("data_batch_2", "d4bba439e000b95fd0a9bffe97cbabec"),
    ("data_batch_3", "54ebc095f3ab1f0389bbae665268c751"),
    ("data_batch_4", "634d18415352ddfa80567beed471001a"),
    ("data_batch_5", "482c414d41f54cd18b22e5b47cb7c3cb"),
    ("test_batch", "40351d587109b95175f43aff81a1287e"),
    ("batches.meta", "5ff9c542aee3614f3951f8cda6e48888"),
    ("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),
)
CIFAR100_FILES = (
    ("train", "16019d7e3df5f24257cddd939b257f8d"),
    ("test", "f0ef6b0ae62326f3e7ffdfab6717acfc"),
    ("meta", "7973b15100ade9c7d40fb424638fde48"),
    ("cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85"),
)


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
        files=CIFAR10_FILES,
    )
    register(
        "cifar100",
        f"{_HERE}.cifar:load_cifar100",
        "CIFAR-100 (fine labels) from --data-dir, 3x32x32, 100 classes, 45k/5k train/val split + official test set",
        shape=(3, 32, 32),
        classes=100,
        splits=(45_000, 5_000, 10_000),
        files=CIFAR100_FILES,
    )
    register(
        "fashion-mnist",
        f"{_HERE}.mnist:load_fashion_mnist",
        "Fashion-MNIST from IDX files (--data-dir, ~/.cache/initmem/fashion-mnist or Debian's "
        "dataset-fashion-mnist), 1x28x28, 54k/6k train/val split + official test set",
        shape=(1, 28, 28),
        classes=10,
        splits=(54_000, 6_000, 10_000),
        files=FASHION_MNIST_FILES,
    )
    register(
        "mnist",
        f"{_HERE}.mnist:load_mnist",
        "MNIST from IDX files (--data-dir or ~/.cache/initmem/mnist), 1x28x28, "
        "54k/6k train/val split + official test set",
        shape=(1, 28, 28),
        classes=10,
        splits=(54_000, 6_000, 10_000),
        files=MNIST_FILES,
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
