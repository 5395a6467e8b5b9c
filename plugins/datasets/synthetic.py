"""Generated image classification data for tests and benchmarks: no files, no download.

Each class has a smooth random prototype (drawn at 4x4 and upsampled, so it survives crops
and flips reasonably); an example is ``0.25 + 0.5 * prototype + 0.15 * noise`` clipped to
0..1, float32. Labels are balanced and shuffled. Everything is drawn from one CPU generator
seeded by ``config.data_seed``, so a data seed fixes the whole dataset.

``synthetic`` is 3x32x32, 10 classes, 1024 train / 256 val / 256 test. The family
``synthetic:<variant>`` takes ``CxHxW[-cK][-nN]`` (channels x height x width, K classes,
N training examples; validation and test hold N/4 each, at least 1), e.g.
``synthetic:1x8x8-c4-n200``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from initmem_core.contracts import DatasetBundle
from initmem_core.errors import ConfigError

from .common import apply_train_size, channel_stats

MAX_ELEMENTS = 2**30  # 4 GiB of float32: a typo like 3x3232x32 should not swallow the machine
PROTOTYPE_RESOLUTION = 4
VARIANT_PATTERN = re.compile(r"(?P<c>[0-9]+)x(?P<h>[0-9]+)x(?P<w>[0-9]+)(?:-c(?P<k>[0-9]+))?(?:-n(?P<n>[0-9]+))?")
VARIANT_HELP = "expected CxHxW[-cK][-nN], e.g. synthetic:1x8x8-c4-n200 or synthetic:3x32x32-c10"


@dataclass(frozen=True)
class SyntheticSpec:
    channels: int = 3
    height: int = 32
    width: int = 32
    classes: int = 10
    train: int = 1024

    @property
    def holdout(self) -> int:
        return max(1, self.train // 4)


def parse_variant(variant: str) -> SyntheticSpec:
    """``"1x8x8-c4-n200"`` -> ``SyntheticSpec(1, 8, 8, 4, 200)``; anything else is a ConfigError."""
    text = str(variant)
    match = VARIANT_PATTERN.fullmatch(text)
    if match is None:
        raise ConfigError(f"--data synthetic:{text}: bad variant; {VARIANT_HELP}")
    defaults = SyntheticSpec()
    spec = SyntheticSpec(
        channels=int(match["c"]),
        height=int(match["h"]),
        width=int(match["w"]),
        classes=int(match["k"]) if match["k"] is not None else defaults.classes,
        train=int(match["n"]) if match["n"] is not None else defaults.train,
    )
    if min(spec.channels, spec.height, spec.width) < 1:
        raise ConfigError(f"--data synthetic:{text}: channels, height and width must be 1 or more; {VARIANT_HELP}")
    if spec.classes < 2:
        raise ConfigError(f"--data synthetic:{text}: needs at least 2 classes (-c2 or more); {VARIANT_HELP}")
    if spec.train < 1:
        raise ConfigError(f"--data synthetic:{text}: needs at least 1 training example (-n1 or more); {VARIANT_HELP}")
    total = (spec.train + 2 * spec.holdout) * spec.channels * spec.height * spec.width
    if total > MAX_ELEMENTS:
        raise ConfigError(
            f"--data synthetic:{text}: {total:,} pixel values is more than the limit of {MAX_ELEMENTS:,}; "
            "use smaller images or fewer examples"
        )
    return spec


def generate(spec: SyntheticSpec, data_seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator(device="cpu").manual_seed(int(data_seed))
    low = (spec.classes, spec.channels, min(spec.height, PROTOTYPE_RESOLUTION), min(spec.width, PROTOTYPE_RESOLUTION))
    prototypes = torch.rand(low, generator=generator)
    if low[2:] != (spec.height, spec.width):
        prototypes = torch.nn.functional.interpolate(
            prototypes, size=(spec.height, spec.width), mode="bilinear", align_corners=False
        )
    splits = {}
    for split, n in (("train", spec.train), ("val", spec.holdout), ("test", spec.holdout)):
        labels = (torch.arange(n) % spec.classes)[torch.randperm(n, generator=generator)]
        noise = torch.randn((n, spec.channels, spec.height, spec.width), generator=generator)
        images = (0.25 + 0.5 * prototypes[labels] + 0.15 * noise).clamp_(0.0, 1.0).contiguous()
        splits[split] = (images, labels.to(torch.int64))
    return splits


def build(spec: SyntheticSpec, config: Any, name: str) -> DatasetBundle:
    splits = generate(spec, config.data_seed)
    mean, std = channel_stats(splits["train"][0])
    bundle = DatasetBundle(
        name=name,
        train_x=splits["train"][0],
        train_y=splits["train"][1],
        val_x=splits["val"][0],
        val_y=splits["val"][1],
        test_x=splits["test"][0],
        test_y=splits["test"][1],
        num_classes=spec.classes,
        mean=mean,
        std=std,
        augment_default=False,
        pixel_scale=1.0,
        reads_files=False,  # generated
    )
    return apply_train_size(bundle, config)


def load_synthetic(config: Any) -> DatasetBundle:
    return build(SyntheticSpec(), config, "synthetic")


def load_synthetic_variant(config: Any, variant: str | None = None) -> DatasetBundle:
    if not variant:
        return load_synthetic(config)
    return build(parse_variant(variant), config, f"synthetic:{variant}")
