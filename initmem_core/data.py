"""What a dataset plugin returns: the whole dataset as tensors, ready to live on the device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass
class DatasetBundle:
    """Train/val/test splits held as tensors.

    Images are ``N x C x H x W``, either ``uint8`` in 0..255 (CIFAR: 4x less memory on the
    device; ``pixel_scale=255``) or ``float32`` already in 0..1 (``pixel_scale=1``). Labels are
    ``int64``. ``mean``/``std`` (per channel, in 0..1 units) normalise a batch after
    augmentation. ``augment_default`` says whether crop+flip augmentation is on by default.
    """

    name: str
    train_x: "torch.Tensor"
    train_y: "torch.Tensor"
    val_x: "torch.Tensor"
    val_y: "torch.Tensor"
    test_x: "torch.Tensor"
    test_y: "torch.Tensor"
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment_default: bool = False
    pixel_scale: float = 1.0

    @property
    def in_channels(self) -> int:
        return int(self.train_x.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.train_x.shape[-1])

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train_y), "val": len(self.val_y), "test": len(self.test_y)}
