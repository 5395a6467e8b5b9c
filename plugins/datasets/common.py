"""Helpers every built-in dataset shares: the seeded split, channel statistics, --train-size."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from initmem_core.contracts import DatasetBundle
from initmem_core.errors import ConfigError


def split_permutation(n: int, data_seed: int) -> torch.Tensor:
    """A fixed permutation of ``range(n)`` determined by ``data_seed`` alone (CPU generator)."""
    generator = torch.Generator(device="cpu").manual_seed(int(data_seed))
    return torch.randperm(n, generator=generator)


def official_split(
    name: str,
    images: torch.Tensor,
    labels: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    data_seed: int,
    val_fraction: float,
    **fields: Any,
) -> DatasetBundle:
    """An official train/test release as a bundle: the last ``val_fraction`` of a ``data_seed``
    permutation of the training set is the validation split; the official test set is the test split."""
    n = len(labels)
    n_val = int(round(n * val_fraction))
    order = split_permutation(n, data_seed)
    train_idx, val_idx = order[: n - n_val], order[n - n_val :]
    return DatasetBundle(
        name=name,
        train_x=images[train_idx],
        train_y=labels[train_idx],
        val_x=images[val_idx],
        val_y=labels[val_idx],
        test_x=test_x,
        test_y=test_y,
        **fields,
    )


def channel_stats(images: torch.Tensor, pixel_scale: float = 1.0) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of ``N x C x H x W`` images, in 0..1 units (float64 sums)."""
    values = images.to(torch.float64) / pixel_scale
    per_channel = values.transpose(0, 1).reshape(values.shape[1], -1)
    mean = per_channel.mean(dim=1)
    std = per_channel.std(dim=1, unbiased=False).clamp_min(1e-6)  # a constant channel must not divide by 0
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)


def apply_train_size(bundle: DatasetBundle, config: Any) -> DatasetBundle:
    """Keep only the first ``config.train_size`` training examples (0 keeps all).

    Applied after the train/val split, so validation and test never change with it, and to the
    training split only. Idempotent, so applying it again (e.g. centrally, for a third-party
    dataset) is harmless. Normalisation statistics are left as computed on the full training
    split, so ``--train-size`` changes which examples are seen, not how pixels are scaled.
    """
    size = int(getattr(config, "train_size", 0) or 0)
    available = len(bundle.train_y)
    if size <= 0 or size == available:
        return bundle
    if size > available:
        raise ConfigError(
            f"--train-size {size} is larger than the {available} training examples of "
            f"{bundle.name}; use a value up to {available}, or 0 for all"
        )
    return dataclasses.replace(bundle, train_x=bundle.train_x[:size].clone(), train_y=bundle.train_y[:size].clone())
