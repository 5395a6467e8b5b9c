"""The device-resident loader, its augmentation, the torchvision reference loader, evaluation."""

from __future__ import annotations

import itertools

import pytest
import torch
from torchvision.transforms.v2 import functional as TF

from initmem_core.config import RunConfig
from initmem_core.contracts import DatasetBundle
from initmem_core.errors import ConfigError
from initmem_core.training.loaders import (
    DeviceLoader,
    EvalLoader,
    TorchvisionLoader,
    make_loaders,
    normalize,
    random_crop_flip,
    resolve_augment,
)

MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def uint8_images(n: int = 37, shape=(3, 6, 5), seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def float_images(n: int = 37, shape=(3, 6, 5), seed: int = 0) -> torch.Tensor:
    return torch.rand((n, *shape), generator=torch.Generator().manual_seed(seed))


def loader(cls=DeviceLoader, x=None, y=None, *, seed=0, **options):
    x = uint8_images() if x is None else x
    y = torch.arange(len(x)) if y is None else y
    settings = dict(
        batch_size=8,
        mean=MEAN[: x.shape[1]],
        std=STD[: x.shape[1]],
        pixel_scale=255.0 if x.dtype == torch.uint8 else 1.0,
        augment=False,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
        device="cpu",
    )
    settings.update(options)
    return cls(x, y, **settings)


def reference_crop_flip(images, offsets_y, offsets_x, flips, padding=4):
    """Per sample with torchvision's functional ops: pad with zeros, crop, maybe flip."""
    h, w = images.shape[-2:]
    out = []
    for image, oy, ox, flip in zip(images, offsets_y.tolist(), offsets_x.tolist(), flips.tolist()):
        crop = TF.crop(TF.pad(image, [padding], fill=0), oy, ox, h, w)
        out.append(TF.horizontal_flip(crop) if flip else crop)
    return torch.stack(out)


# -- random_crop_flip -------------------------------------------------------------------------------


@pytest.mark.parametrize("padding", [4, 2, 0])
@pytest.mark.parametrize("make", [uint8_images, float_images])
def test_random_crop_flip_matches_torchvision_reference(make, padding):
    images = make(64, (3, 7, 5))
    g = torch.Generator().manual_seed(1)
    offsets_y = torch.randint(0, 2 * padding + 1, (64,), generator=g)
    offsets_x = torch.randint(0, 2 * padding + 1, (64,), generator=g)
    offsets_y[:2], offsets_x[:2] = torch.tensor([0, 2 * padding]), torch.tensor([2 * padding, 0])  # the corners
    flips = torch.rand(64, generator=g) < 0.5
    out = random_crop_flip(images, offsets_y, offsets_x, flips, padding=padding)
    assert out.dtype == images.dtype and out.shape == images.shape
    assert torch.equal(out, reference_crop_flip(images, offsets_y, offsets_x, flips, padding))


def test_random_crop_flip_identity_and_pure():
    images = uint8_images(5)
    before = images.clone()
    centre = torch.full((5,), 4)
    assert torch.equal(random_crop_flip(images, centre, centre, torch.zeros(5, dtype=torch.bool)), images)
    assert torch.equal(random_crop_flip(images, centre, centre, torch.ones(5, dtype=torch.bool)), images.flip(-1))
    assert torch.equal(images, before)


# -- DeviceLoader ---------------------------------------------------------------------------------


@pytest.mark.parametrize("augment", [False, True])
def test_every_example_exactly_once_per_epoch(augment):
    data = loader(y=torch.arange(37), augment=augment)
    assert len(data) == 5
    for _ in range(3):
        batches = list(data)
        assert [len(y) for _, y in batches] == [8, 8, 8, 8, 5]
        seen = torch.cat([y for _, y in batches])
        assert sorted(seen.tolist()) == list(range(37))
    assert torch.cat([y for _, y in data]).tolist() != list(range(37))  # shuffled


def test_drop_last_and_no_shuffle():
    data = loader(drop_last=True, shuffle=False, generator=None)
    assert len(data) == 4 and [len(y) for _, y in data] == [8] * 4
    assert torch.cat([y for _, y in data]).tolist() == list(range(32))


def test_batches_are_normalised_float32_and_int64_labels():
    x = uint8_images()
    data = loader(x=x, shuffle=False, generator=None, batch_size=37)
    ((images, labels),) = list(data)
    assert images.dtype == torch.float32 and labels.dtype == torch.int64
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    torch.testing.assert_close(images, (x.float() / 255 - mean) / std, rtol=1e-6, atol=1e-6)
    assert data.x.dtype == torch.uint8  # stored as uint8 on the device


def test_float_dataset_is_never_written_into():
    x = float_images()
    before = x.clone()
    for options in (dict(shuffle=False, generator=None), dict(shuffle=True), dict(augment=True)):
        for _ in loader(x=x, **options):
            pass
    assert torch.equal(x, before)


def test_augmented_batches_match_the_reference_draws():
    # Replay the documented draw order (permutation, offsets y, offsets x, flips) on a twin
    # generator, and build each batch with torchvision's per-sample functional ops.
    x = uint8_images(21, (3, 8, 8))
    data = loader(x=x, augment=True, seed=7, batch_size=6)
    twin = torch.Generator().manual_seed(7)
    for _ in range(2):
        order = torch.randperm(21, generator=twin)
        offsets_y, offsets_x = (torch.randint(0, 9, (21,), generator=twin) for _ in range(2))
        flips = torch.rand(21, generator=twin) < 0.5
        expected = reference_crop_flip(x[order], offsets_y, offsets_x, flips)
        expected = normalize(expected, torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1), 255.0)
        images = torch.cat([b for b, _ in data])
        assert torch.equal(images, expected)
    assert torch.equal(data.generator.get_state(), twin.get_state())


def test_same_seed_same_batches_and_resume():
    first, second = loader(augment=True, seed=3), loader(augment=True, seed=3)
    for _ in range(2):
        for (xa, ya), (xb, yb) in zip(first, second, strict=True):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
    other = loader(augment=True, seed=4)
    assert not torch.equal(next(iter(first))[0], next(iter(other))[0])

    # Resume: restore the state saved at an epoch boundary, optionally mid-epoch.
    data = loader(augment=True, seed=11)
    list(data)
    state = data.state_dict()
    epoch = list(data)
    data.load_state_dict(state)
    again = list(data)
    data.load_state_dict(state)
    tail = list(data.epoch(start_batch=3))
    for (xa, ya), (xb, yb) in zip(epoch, again, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    for (xa, ya), (xb, yb) in zip(epoch[3:], tail, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_randomness_drawn_when_the_epoch_starts():
    data = loader(augment=True)
    state = data.generator.get_state()
    iterator = iter(data)
    assert not torch.equal(state, data.generator.get_state())  # drawn by iter(), not lazily
    moved = data.generator.get_state()
    list(iterator)
    assert torch.equal(moved, data.generator.get_state())


def test_generator_is_required_for_shuffle_or_augment():
    with pytest.raises(ValueError):
        loader(generator=None)
    with pytest.raises(ValueError):
        loader(generator=None, shuffle=False, augment=True)


# -- TorchvisionLoader -------------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "pixel_scale"), [(uint8_images, 255.0), (float_images, 1.0), (float_images, 2.0)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_torchvision_loader_agrees_exactly_without_augmentation(make, pixel_scale, shuffle):
    x = make(37)
    options = dict(x=x, seed=5, shuffle=shuffle, pixel_scale=pixel_scale)
    device_loader, reference = loader(DeviceLoader, **options), loader(TorchvisionLoader, **options)
    assert len(device_loader) == len(reference) == 5
    for _ in range(2):  # two epochs: the generator advances the same way in both
        for (xa, ya), (xb, yb) in zip(device_loader, reference, strict=True):
            assert xa.dtype == xb.dtype == torch.float32 and ya.dtype == yb.dtype == torch.int64
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert torch.equal(device_loader.generator.get_state(), reference.generator.get_state())


def test_torchvision_loader_augmentation_is_a_crop_flip_and_seeded():
    x = uint8_images(10, (3, 4, 4))
    data = loader(TorchvisionLoader, x=x, augment=True, seed=2, batch_size=4)
    global_state = torch.get_rng_state()
    epoch = list(data)
    assert torch.equal(global_state, torch.get_rng_state())  # the global RNG is left alone
    again = list(loader(TorchvisionLoader, x=x, augment=True, seed=2, batch_size=4))
    for (xa, ya), (xb, yb) in zip(epoch, again, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    # Every output is one of the 9 x 9 x 2 crops/flips of its input, as random_crop_flip makes them.
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    grid = list(itertools.product(range(9), range(9), (False, True)))
    oy, ox, fl = (torch.tensor(v) for v in zip(*grid))
    images, labels = torch.cat([b for b, _ in epoch]), torch.cat([y for _, y in epoch])
    for image, label in zip(images, labels.tolist()):
        candidates = normalize(random_crop_flip(x[label].expand(len(grid), -1, -1, -1), oy, ox, fl), mean, std, 255.0)
        assert (candidates == image).flatten(1).all(1).any()


# -- evaluation and wiring -----------------------------------------------------------------------------


def test_eval_batches_in_order_without_augmentation():
    x = uint8_images(37)
    batches = list(EvalLoader(x, torch.arange(37), batch_size=10, mean=MEAN, std=STD, pixel_scale=255.0))
    assert [len(y) for _, y in batches] == [10, 10, 10, 7]
    assert torch.cat([y for _, y in batches]).tolist() == list(range(37))
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    assert torch.equal(torch.cat([b for b, _ in batches]), normalize(x, mean, std, 255.0))
    evaluation = EvalLoader(x, torch.arange(37), batch_size=16, mean=MEAN, std=STD, pixel_scale=255.0)
    assert len(evaluation) == 3 and len(list(evaluation)) == len(list(evaluation)) == 3  # re-iterable


def _bundle(augment_default: bool) -> DatasetBundle:
    x = uint8_images(30, (3, 8, 8))
    y = torch.arange(30) % 3
    return DatasetBundle(
        "toy",
        x[:20],
        y[:20],
        x[20:25],
        y[20:25],
        x[25:],
        y[25:],
        3,
        MEAN,
        STD,
        augment_default=augment_default,
        pixel_scale=255.0,
    )


@pytest.mark.parametrize(
    ("choice", "default", "expected"),
    [
        ("auto", True, True),
        ("auto", False, False),
        ("on", False, True),
        ("off", True, False),
    ],
)
def test_resolve_augment(choice, default, expected):
    assert resolve_augment(RunConfig(augment=choice), _bundle(default)) is expected


@pytest.mark.parametrize("kind", ["device", "torchvision"])
def test_make_loaders(kind):
    bundle = _bundle(True)
    config = RunConfig(batch_size=6, eval_batch_size=4, loader=kind)
    train, evals = make_loaders(bundle, config, "cpu", torch.Generator().manual_seed(0), torch.Generator())
    assert isinstance(train, DeviceLoader if kind == "device" else TorchvisionLoader)
    assert train.augment and len(train) == 4
    assert set(evals) == {"train", "val", "test"}
    assert [len(evals[s]) for s in ("train", "val", "test")] == [5, 2, 2]
    assert torch.cat([y for _, y in evals["val"]]).tolist() == bundle.val_y.tolist()
    if kind == "device":  # one device copy of the training images
        assert evals["train"].x.data_ptr() == train.x.data_ptr()


def test_make_loaders_rejects_an_unknown_kind():
    with pytest.raises(ConfigError) as error:
        make_loaders(_bundle(False), RunConfig(loader="dali"), "cpu", torch.Generator(), torch.Generator())
    assert "--loader" in str(error.value) and "device" in str(error.value)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("augment", [False, True])
def test_cuda_batches_equal_cpu_batches(augment):
    x = uint8_images(300, (3, 32, 32))
    on_cpu, on_gpu = (
        loader(x=x, augment=augment, seed=9, batch_size=64),
        loader(x=x, augment=augment, seed=9, batch_size=64, device="cuda"),
    )
    assert on_gpu.x.is_cuda and on_gpu.x.dtype == torch.uint8
    for (xa, ya), (xb, yb) in zip(on_cpu, on_gpu, strict=True):
        assert xb.is_cuda and yb.is_cuda
        assert torch.equal(xa, xb.cpu()) and torch.equal(ya, yb.cpu())
    reference = loader(TorchvisionLoader, x=x, seed=9, batch_size=64, device="cuda")
    if not augment:
        for (xa, ya), (xb, yb) in zip(loader(x=x, seed=9, batch_size=64, device="cuda"), reference, strict=True):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
