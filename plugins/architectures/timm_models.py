"""Bridge to timm: ``--arch timm:<model>`` builds any timm model, randomly initialized."""

from __future__ import annotations

import difflib
from typing import Any

import timm
from torch import nn

from initmem_core.errors import ConfigError


def build_timm_model(
    *, in_channels: int, num_classes: int, image_size: int, variant: str | None = None, **options: Any
) -> nn.Module:
    """timm's ``variant``, randomly initialized (``pretrained=False``), for the dataset's input
    channels (``in_chans``) and classes (``num_classes``, the classifier head timm builds), and,
    for a model of fixed input size, its image size (``img_size``); ``options`` (``--arch-arg``)
    go to ``timm.create_model`` as they are. One the model does not take is a ``ConfigError``."""
    if not variant or not timm.is_model(variant):
        close = difflib.get_close_matches(variant or "", timm.list_models(), n=5, cutoff=0.5)
        hint = (
            f"close matches: {', '.join('timm:' + name for name in close)}"
            if close
            else "see timm.list_models() for the names"
        )
        raise ConfigError(f"unknown timm model '{variant}'; {hint}")
    common = dict(pretrained=False, num_classes=num_classes, in_chans=in_channels, **options)
    try:
        # Models with a fixed input size (ViTs and kin) must be told the image size...
        return timm.create_model(variant, img_size=image_size, **common)
    except TypeError as error:
        # ...and convolutional models reject the argument before building anything.
        if "img_size" not in str(error):
            raise _option_error(variant, options, error) from None
    try:
        return timm.create_model(variant, **common)
    except TypeError as error:
        raise _option_error(variant, options, error) from None


def _option_error(variant: str, options: dict[str, Any], error: TypeError) -> Exception:
    """An ``--arch-arg`` the model does not take, in one line; any other ``TypeError`` as it is."""
    named = [key for key in options if repr(key) in str(error)]
    if "unexpected keyword argument" not in str(error) or not named:
        return error
    return ConfigError(f"--arch-arg {named[0]}: timm model {variant} does not take it ({error})")
