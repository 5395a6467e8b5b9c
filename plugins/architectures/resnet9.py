"""ResNet-9 of the Myrtle.ai DAWNBench CIFAR-10 entry (David Page, 2018).

prep conv 3->64; layer1 conv 64->128 + maxpool + residual(two 128->128); layer2 conv 128->256 +
maxpool; layer3 conv 256->512 + maxpool + residual(two 512->512); global max pool;
Linear(512, classes, no bias) x 0.125. Every conv is 3x3 conv-BN-ReLU without bias. The final
pool is global (the original uses MaxPool2d(4) on 32x32), so any image size >= 8 works:
8x8 inputs reach 1x1 after the three 2x2 maxpools.
"""

from __future__ import annotations

import torch
from torch import nn

#: The original scales the logits down so the default-init output is small.
LOGIT_SCALE = 0.125


def conv_bn(in_channels: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class Residual(nn.Module):
    """``x + f(x)`` with two conv-BN-ReLU blocks and no activation after the sum (as in Myrtle)."""

    def __init__(self, channels: int):
        super().__init__()
        self.res1 = conv_bn(channels, channels)
        self.res2 = conv_bn(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.res2(self.res1(x))


class ScaleLogits(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale

    def extra_repr(self) -> str:
        return f"scale={self.scale}"


class GlobalMaxPool(nn.Module):
    """Max over all spatial positions. Same function as AdaptiveMaxPool2d(1) + Flatten, but its CUDA
    backward is deterministic (--deterministic refuses adaptive max pooling on GPUs)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=(2, 3))


class ResNet9(nn.Sequential):
    def __init__(self, in_channels: int = 3, num_classes: int = 10):
        super().__init__()
        self.prep = conv_bn(in_channels, 64)
        self.layer1 = nn.Sequential(conv_bn(64, 128), nn.MaxPool2d(2), Residual(128))
        self.layer2 = nn.Sequential(conv_bn(128, 256), nn.MaxPool2d(2))
        self.layer3 = nn.Sequential(conv_bn(256, 512), nn.MaxPool2d(2), Residual(512))
        self.pool = GlobalMaxPool()
        self.linear = nn.Linear(512, num_classes, bias=False)
        self.scale = ScaleLogits(LOGIT_SCALE)


def build_resnet9(*, in_channels: int, num_classes: int, image_size: int = 32, variant: str | None = None) -> ResNet9:
    if image_size < 8:
        raise ValueError(f"ResNet-9 needs images of at least 8x8 (three 2x2 maxpools), got {image_size}")
    return ResNet9(in_channels=in_channels, num_classes=num_classes)
