"""CIFAR ResNet-20/32/44/56/110 of He et al. (2016), Section 4.2.

3x3 conv 3->16, then three stages of ``n`` basic blocks at 16, 32 and 64 channels (stride 2 at
the start of stages 2 and 3), global average pool, Linear(64, classes). Shortcuts are the
parameter-free "option A" of the paper, so the parameter counts match it (ResNet-56: 853,018).
Weights keep PyTorch's default init; the initializer plugin sets the scale.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

STAGE_WIDTHS = (16, 32, 64)


def conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)


class ShortcutA(nn.Module):
    """Option A identity shortcut: subsample by ``stride`` and zero-pad the new channels.

    The padding is split between both ends of the channel axis, as in the widely used
    reference implementation; it has no parameters.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        if out_channels < in_channels:
            raise ValueError(f"option-A shortcut cannot shrink channels ({in_channels} -> {out_channels})")
        self.stride = stride
        extra = out_channels - in_channels
        self.pad_front, self.pad_back = extra // 2, extra - extra // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            # Matches a stride-s 3x3 conv with padding 1: ceil(H / s) rows, also for odd H.
            x = x[:, :, :: self.stride, :: self.stride]
        if self.pad_front or self.pad_back:
            x = F.pad(x, (0, 0, 0, 0, self.pad_front, self.pad_back))
        return x


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = conv3x3(in_channels, out_channels, stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = conv3x3(out_channels, out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)
        needs_projection = stride != 1 or in_channels != out_channels
        self.shortcut = ShortcutA(in_channels, out_channels, stride) if needs_projection else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, blocks_per_stage: int, in_channels: int = 3, num_classes: int = 10):
        super().__init__()
        self.conv1 = conv3x3(in_channels, STAGE_WIDTHS[0])
        self.bn1 = nn.BatchNorm2d(STAGE_WIDTHS[0])
        stages, width = [], STAGE_WIDTHS[0]
        for index, out_width in enumerate(STAGE_WIDTHS):
            stride = 1 if index == 0 else 2
            blocks = [BasicBlock(width, out_width, stride)]
            blocks += [BasicBlock(out_width, out_width) for _ in range(blocks_per_stage - 1)]
            stages.append(nn.Sequential(*blocks))
            width = out_width
        self.layer1, self.layer2, self.layer3 = stages
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        # Global average pool as a mean: AdaptiveAvgPool2d's CUDA backward is not deterministic.
        return self.fc(x.mean(dim=(2, 3)))


def build_cifar_resnet(
    depth: int, *, in_channels: int, num_classes: int, image_size: int = 32, variant: str | None = None
) -> CifarResNet:
    """ResNet-``depth`` for ``depth = 6n + 2``; works for any image size (global pooling)."""
    if (depth - 2) % 6 or depth < 8:
        raise ValueError(f"CIFAR ResNet depth must be 6n + 2 with n >= 1, got {depth}")
    return CifarResNet((depth - 2) // 6, in_channels=in_channels, num_classes=num_classes)


def build_resnet20(
    *, in_channels: int, num_classes: int, image_size: int = 32, variant: str | None = None
) -> CifarResNet:
    return build_cifar_resnet(20, in_channels=in_channels, num_classes=num_classes)


def build_resnet32(
    *, in_channels: int, num_classes: int, image_size: int = 32, variant: str | None = None
) -> CifarResNet:
    return build_cifar_resnet(32, in_channels=in_channels, num_classes=num_classes)


def build_resnet44(
    *, in_channels: int, num_classes: int, image_size: int = 32, variant: str | None = None
) -> CifarResNet:
    return build_cifar_resnet(44, in_channels=in_channels, num_classes=num_classes)


def build_resnet56(
    *, in_channels: int, num_classes: int, image_size: int = 32, variant: str | None = None
) -> CifarResNet:
    return build_cifar_resnet(56, in_channels=in_channels, num_classes=num_classes)


def build_resnet110(
    *, in_channels: int, num_classes: int, image_size: int = 32, variant: str | None = None
) -> CifarResNet:
    return build_cifar_resnet(110, in_channels=in_channels, num_classes=num_classes)
