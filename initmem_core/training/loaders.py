"""Batches for training and evaluation: the hot path between a ``DatasetBundle`` and the model.

``DeviceLoader`` keeps the whole dataset on the device (``uint8`` stays ``uint8``) and does
everything per batch with a handful of tensor ops: an index permutation for shuffling, a
batched random crop (4-pixel zero padding) and horizontal flip, and normalisation. There is no
per-sample Python work and no ``DataLoader``. All randomness comes from one seeded CPU
``torch.Generator`` and is drawn once per epoch when the epoch starts, so saving the
generator's state at an epoch boundary (``state_dict``) is enough to resume bit-exactly.

``TorchvisionLoader`` is the same interface built the textbook way (``DataLoader`` over a
per-sample ``Dataset`` with ``torchvision.transforms.v2``), kept as a reference and for
``--loader torchvision``. With augmentation off and the same generator seed, both loaders yield
identical batches in the same order.

Every loader yields ``(images, labels)``: images ``float32`` normalised as
``((x / pixel_scale) - mean) / std`` per channel, labels ``int64``, both on ``device``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from initmem_core.config import RunConfig
from initmem_core.contracts import DatasetBundle
from initmem_core.errors import ConfigError

Batch = tuple[torch.Tensor, torch.Tensor]

LOADER_KINDS = ("device", "torchvision")
DEFAULT_PADDING = 4
#: The evaluation loader of the whole test split, present only when ``--eval-size`` capped ``test``.
FULL_TEST = "test_full"


# -- pure functions -----------------------------------------------------------------------------


def random_crop_flip(
    images: torch.Tensor,
    offsets_y: torch.Tensor,
    offsets_x: torch.Tensor,
    flips: torch.Tensor,
    padding: int = DEFAULT_PADDING,
) -> torch.Tensor:
    """Crop each image of a batch from its zero-padded copy, then mirror it where ``flips`` is set.

    ``images``: ``B x C x H x W`` of any dtype (raw pixels, before normalisation, so the padding
    is black as with ``torchvision`` ``RandomCrop(size, padding=padding)``). ``offsets_y`` and
    ``offsets_x``: ``B`` integers in ``0..2*padding``, the top-left corner of the ``H x W`` crop
    in the padded image. ``flips``: ``B`` booleans. Returns a new ``B x C x H x W`` tensor of the
    same dtype: for image ``b``, ``pad(images[b])[:, oy:oy+H, ox:ox+W]``, flipped left-right if
    ``flips[b]``. One gather, no Python loop over the batch.
    """
    if images.ndim != 4:
        raise ValueError(f"images must be B x C x H x W, got shape {tuple(images.shape)}")
    b, c, h, w = images.shape
    device = images.device
    padded = F.pad(images, (padding, padding, padding, padding)) if padding else images
    width = w + 2 * padding
    rows = offsets_y.to(device=device, dtype=torch.int64).view(b, 1) + torch.arange(h, device=device)
    columns = torch.arange(w, device=device)
    columns = torch.where(flips.to(device=device, dtype=torch.bool).view(b, 1), columns.flip(0), columns)
    columns = offsets_x.to(device=device, dtype=torch.int64).view(b, 1) + columns
    flat = (rows.view(b, h, 1) * width + columns.view(b, 1, w)).view(b, 1, h * w).expand(b, c, h * w)
    return padded.reshape(b, c, -1).gather(2, flat).view(b, c, h, w)


def normalize(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, pixel_scale: float) -> torch.Tensor:
    """``((images / pixel_scale) - mean) / std`` in float32, never writing into ``images``.

    The operations are those of ``transforms.v2`` ``ToDtype(float32, scale=True)`` (a multiply by
    ``1 / pixel_scale``) followed by ``Normalize`` (subtract, then divide), in the same order, so
    both loaders round identically. ``mean``/``std`` broadcast against ``images``.
    """
    out = images.to(torch.float32)
    if pixel_scale != 1:
        out = out * (1.0 / pixel_scale)
    return out.sub(mean).div_(std)


def _stats(values: Sequence[float], channels: int, what: str, device: torch.device) -> torch.Tensor:
    tensor = torch.as_tensor(list(values), dtype=torch.float32, device=device).flatten()
    if tensor.numel() not in (1, channels):
        raise ValueError(f"{what} has {tensor.numel()} values for {channels} channels")
    return tensor.expand(channels).reshape(1, channels, 1, 1).clone()


class _Batches:
    """What every loader shares: a split's images ``x`` and labels ``y``, checked, batched by
    ``batch_size`` and normalised with ``mean``, ``std`` and ``pixel_scale``, held on ``device``
    unless ``data_on_cpu``."""

    data_on_cpu = False

    def __init__(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        batch_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        pixel_scale: float = 1.0,
        device: torch.device | str = "cpu",
        drop_last: bool = False,
    ):
        if x.ndim != 4:
            raise ValueError(f"images must be N x C x H x W, got shape {tuple(x.shape)}")
        if len(x) != len(y):
            raise ValueError(f"{len(x)} images but {len(y)} labels")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be 1 or more, got {batch_size}")
        self.device = torch.device(device)
        held = torch.device("cpu") if self.data_on_cpu else self.device
        self.x = x.to(held)  # the one transfer; keeps the dtype (uint8 stays uint8)
        self.y = y.to(held, torch.int64)
        self.batch_size, self.drop_last = int(batch_size), bool(drop_last)
        self.pixel_scale = float(pixel_scale)
        channels = int(x.shape[1])
        self.mean = _stats(mean, channels, "mean", held)
        self.std = _stats(std, channels, "std", held)

    def __len__(self) -> int:
        n = len(self.y)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    @property
    def num_examples(self) -> int:
        return len(self.y)


# -- training loaders ---------------------------------------------------------------------------


class _TrainingLoader(_Batches):
    """What the training loaders share: a seeded ``generator``, required when ``shuffle`` or
    ``augment`` is on; resuming restores its state. ``x``: ``N x C x H x W`` ``uint8`` (with
    ``pixel_scale=255``) or ``float32`` (with ``pixel_scale=1``); ``y``: ``N`` labels."""

    def __init__(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        augment: bool = False,
        shuffle: bool = True,
        generator: torch.Generator | None = None,
        padding: int = DEFAULT_PADDING,
        **options: Any,  # _Batches': batch_size, mean, std, pixel_scale, device, drop_last
    ):
        super().__init__(x, y, **options)
        self.shuffle, self.augment, self.padding = bool(shuffle), bool(augment), int(padding)
        self.generator = generator
        if (self.shuffle or self.augment) and self.generator is None:
            raise ValueError("a torch.Generator is required when shuffle or augment is on")

    def state_dict(self) -> dict[str, Any]:
        """What resuming needs: the generator's state (save it at an epoch boundary)."""
        return {"generator": None if self.generator is None else self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("generator") is not None:
            assert self.generator is not None  # a state with a generator comes from a loader with one
            self.generator.set_state(state["generator"])


class DeviceLoader(_TrainingLoader):
    """Batches of a dataset that lives on ``device`` for the whole run.

    Each epoch (each ``iter()``) first draws, in this order, the permutation (if ``shuffle``) and
    then the crop offsets ``y``, ``x`` and the flips for all ``N`` positions (if ``augment``),
    then yields ``len(self)`` batches. With ``drop_last=False`` every example appears exactly
    once per epoch.
    """

    def __iter__(self) -> Iterator[Batch]:
        return self.epoch()

    def epoch(self, start_batch: int = 0) -> Iterator[Batch]:
        """This epoch's batches from batch ``start_batch`` on, its randomness drawn as from 0:
        restoring the generator state saved as an epoch began resumes it exactly there."""
        n = len(self.y)
        order = torch.randperm(n, generator=self.generator).to(self.device) if self.shuffle else None
        params = None
        if self.augment:
            span = 2 * self.padding + 1
            offsets_y = torch.randint(0, span, (n,), generator=self.generator)
            offsets_x = torch.randint(0, span, (n,), generator=self.generator)
            flips = torch.rand(n, generator=self.generator) < 0.5
            params = (offsets_y.to(self.device), offsets_x.to(self.device), flips.to(self.device))
        return self._batches(order, params, int(start_batch))

    def _batches(
        self, order: torch.Tensor | None, params: tuple[torch.Tensor, ...] | None, start_batch: int
    ) -> Iterator[Batch]:
        n, size = len(self.y), self.batch_size
        for index in range(start_batch, len(self)):
            start, stop = index * size, min((index + 1) * size, n)
            if order is None:
                images, labels = self.x[start:stop], self.y[start:stop]
            else:
                rows = order[start:stop]
                images, labels = self.x.index_select(0, rows), self.y.index_select(0, rows)
            if params is not None:
                offsets_y, offsets_x, flips = (p[start:stop] for p in params)
                images = random_crop_flip(images, offsets_y, offsets_x, flips, self.padding)
            yield normalize(images, self.mean, self.std, self.pixel_scale), labels


class _TransformedTensors(torch.utils.data.Dataset):
    """Per-sample transforms over tensors; augmentation seeded per (epoch, example)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, transform: Any, seeded: bool):
        self.x, self.y, self.transform, self.seeded = x, y, transform, seeded
        self.epoch_seed = 0

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> Batch:
        image = self.x[index]
        if self.seeded:
            # transforms.v2 draws from the global CPU generator: fork it, so that the draw depends
            # only on (epoch seed, index) and the caller's global RNG stream is left untouched.
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed((self.epoch_seed + 1_000_003 * int(index)) % (2**63))
                image = self.transform(image)
        else:
            image = self.transform(image)
        return image, self.y[index]


class TorchvisionLoader(_TrainingLoader):
    """The reference loader: ``DataLoader`` + ``TensorDataset``-style dataset + ``transforms.v2``.

    Same constructor and iteration as ``DeviceLoader`` (plus ``num_workers``). Data stays on the
    CPU; each batch is transformed per sample (``RandomCrop(padding=4)``, ``RandomHorizontalFlip``,
    ``ToDtype``, ``Normalize``), collated and then moved to ``device``. Each epoch draws the
    permutation as ``DeviceLoader`` does, then, if augmenting, one seed from which every
    example's crop and flip are drawn; the global RNG is not consumed.
    """

    data_on_cpu = True  # each batch is moved to the device once transformed

    def __init__(self, x: torch.Tensor, y: torch.Tensor, *, num_workers: int = 0, **options: Any):
        from torchvision.transforms import v2

        super().__init__(x, y, **options)
        height, width = (int(s) for s in x.shape[2:])

        steps: list[Any] = []
        if self.augment:
            steps += [v2.RandomCrop((height, width), padding=self.padding), v2.RandomHorizontalFlip(p=0.5)]
        native = (x.dtype == torch.uint8 and self.pixel_scale == 255) or (
            x.is_floating_point() and self.pixel_scale == 1
        )
        if native:
            steps.append(v2.ToDtype(torch.float32, scale=True))
        else:
            scale = 1.0 / self.pixel_scale
            steps.append(v2.Lambda(lambda image: image.to(torch.float32) * scale))
        steps.append(v2.Normalize(mean=self.mean.flatten().tolist(), std=self.std.flatten().tolist()))
        self.transform = v2.Compose(steps)

        self.dataset = _TransformedTensors(self.x, self.y, self.transform, seeded=self.augment)
        self.order = list(range(len(self.y)))  # the sampler: set in place each epoch
        self.loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_size=self.batch_size,
            sampler=self.order,
            drop_last=self.drop_last,
            num_workers=int(num_workers),
            pin_memory=self.device.type == "cuda",
            # DataLoader draws a base seed per epoch; give it its own generator so that neither
            # ours nor the global one is consumed.
            generator=torch.Generator().manual_seed(0),
        )

    def __iter__(self) -> Iterator[Batch]:
        if self.shuffle:
            self.order[:] = torch.randperm(len(self.y), generator=self.generator).tolist()
        if self.augment:
            self.dataset.epoch_seed = int(torch.randint(0, 2**62, (), generator=self.generator))
        return self._batches(iter(self.loader))

    def epoch(self, start_batch: int = 0) -> Iterator[Batch]:
        """``DeviceLoader.epoch``'s batches, the skipped ones built too."""
        return itertools.islice(iter(self), start_batch, None)

    def _batches(self, batches: Iterator[Batch]) -> Iterator[Batch]:
        non_blocking = self.device.type == "cuda"
        for images, labels in batches:
            yield images.to(self.device, non_blocking=non_blocking), labels.to(self.device, non_blocking=non_blocking)


# -- evaluation ----------------------------------------------------------------------------------


class EvalLoader(_Batches):
    """Re-iterable, unshuffled, unaugmented batches of a device-resident split."""

    def __iter__(self) -> Iterator[Batch]:
        for start in range(0, len(self.y), self.batch_size):
            stop = start + self.batch_size
            yield normalize(self.x[start:stop], self.mean, self.std, self.pixel_scale), self.y[start:stop]


# -- wiring ----------------------------------------------------------------------------------------


#: A run's training loader: ``--loader device`` or ``--loader torchvision``.
TrainLoader = DeviceLoader | TorchvisionLoader


def resolve_augment(config: RunConfig, bundle: DatasetBundle) -> bool:
    """``--augment``: ``on``/``off``, or ``auto`` for the dataset's default."""
    return bool(bundle.augment_default) if config.augment == "auto" else config.augment == "on"


def make_loaders(
    bundle: DatasetBundle,
    config: RunConfig,
    device: torch.device | str,
    generator: torch.Generator,
    subset_generator: torch.Generator,
    full_test: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[TrainLoader, dict[str, EvalLoader]]:
    """The training loader (``--loader``) and the evaluation loaders (``train``, ``val``,
    ``test``) of a run.

    Training uses ``config.batch_size``, shuffles with ``generator`` and augments per
    ``--augment``; evaluation uses ``config.eval_batch_size``. The ``train`` evaluation loader
    (unaugmented, for the clean train accuracy) shares the device copy of the training images
    with a ``DeviceLoader``; ``config.train_eval_size`` caps it at a subset drawn from
    ``subset_generator`` (data-seeded: the same examples at every epoch, seed and sigma).
    ``full_test``: the whole test split's images and labels when ``bundle``'s test split is a
    capped subset of it (``--eval-size``): evaluated as ``FULL_TEST``.
    """
    kind = config.loader
    if kind not in LOADER_KINDS:
        raise ConfigError(f"--loader: unknown value '{kind}'; valid values: {', '.join(LOADER_KINDS)}")
    device = torch.device(device)
    common: dict[str, Any] = dict(mean=bundle.mean, std=bundle.std, pixel_scale=bundle.pixel_scale, device=device)
    loader_class = DeviceLoader if kind == "device" else TorchvisionLoader
    train = loader_class(
        bundle.train_x,
        bundle.train_y,
        batch_size=config.batch_size,
        augment=resolve_augment(config, bundle),
        generator=generator,
        **common,
    )
    train_x, train_y = (train.x, train.y) if kind == "device" else (bundle.train_x, bundle.train_y)
    if 0 < config.train_eval_size < len(train_y):
        keep = torch.randperm(len(train_y), generator=subset_generator)[: config.train_eval_size]
        keep = keep.sort().values.to(train_x.device)
        train_x, train_y = train_x.index_select(0, keep), train_y.index_select(0, keep)
    size = config.eval_batch_size
    evals = {
        "train": EvalLoader(train_x, train_y, batch_size=size, **common),
        "val": EvalLoader(bundle.val_x, bundle.val_y, batch_size=size, **common),
        "test": EvalLoader(bundle.test_x, bundle.test_y, batch_size=size, **common),
    }
    if full_test is not None:
        evals[FULL_TEST] = EvalLoader(*full_test, batch_size=size, **common)
    return train, evals
