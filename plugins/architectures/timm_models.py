"""Bridge to timm: ``--arch timm:<model>`` builds any timm model, randomly initialized."""

from __future__ import annotations

import difflib

import timm
from torch import nn

from initmem_core.errors import ConfigError


def build_timm_model(*, in_channels: int, num_classes: int, image_size: int, variant: str | None = None) -> nn.Module:
    if not variant or not timm.is_model(variant):
        close = difflib.get_close_matches(variant or "", timm.list_models(), n=5, cutoff=0.5)
        hint = (
            f"close matches: {', '.join('timm:' + name for name in close)}"
            if close
            else "see timm.list_models() for the names"
        )
        raise ConfigError(f"unknown timm model '{variant}'; {hint}")
    common = dict(pretrained=False, num_classes=num_classes, in_chans=in_channels)
    try:
        # Models with a fixed input size (ViTs and kin) must be told the image size...
        return timm.create_model(variant, img_size=image_size, **common)
    except TypeError as error:
        # ...and convolutional models reject the argument before building anything.
        if "img_size" not in str(error):
            raise
        return timm.create_model(variant, **common)
