"""K CIFAR ResNets as one model (HFTA, MLSys'21), for measuring lockstep training of a sigma group.

A sigma group is K ResNets of one architecture fed the same batches, differing only in their
initialization scale. Fused, they run as one network whose every layer holds K models side by
side along the channel axis (model-major: channel ``k * C + c`` is channel ``c`` of model ``k``):

- the stem is one convolution 3 -> 16K (the input is shared, so this equals K stems, stacked);
- every other convolution is grouped, ``groups=K``: group ``k`` sees only model ``k``'s channels;
- BatchNorm2d over the K*C channels is per model already (its statistics are per channel);
- the option-A shortcut subsamples and zero-pads each model's channels separately;
- the heads are K linear layers applied at once (``fc_weight`` is K x classes x 64).

``forward`` returns K x N x classes. The sum of the K models' losses has, for each model's
parameters, that model's own gradient, and SGD (like every element-wise optimizer) keeps its state
per element, so one optimizer over the fused parameters is K optimizers, one per model.

``merge_states`` builds the fused state from K ``CifarResNet`` state dicts (each model initialized with
its own sigma) and ``split_state`` takes it apart again;
tests/plugins/architectures/test_fused_cifar_resnet.py checks that the K outputs and the updates of a
training step equal those of K separate models. ``fuse_cifar_resnets`` is the fused form the CIFAR
ResNets declare (``contracts.ArchitectureInfo``): what a lockstep sweep trains
(``initmem_plugins.executors.lockstep``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from initmem_plugins.architectures.cifar_resnet import STAGE_WIDTHS, CifarResNet

HEAD_WEIGHT, HEAD_BIAS = "fc_weight", "fc_bias"  # the fused heads; one model's are fc.weight, fc.bias


def grouped_conv3x3(models: int, in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(
        models * in_channels, models * out_channels, 3, stride=stride, padding=1, bias=False, groups=models
    )


def keep_layout(out: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshapes give back the default layout: give a channels-last input a channels-last output."""
    if like.dim() == 4 and like.is_contiguous(memory_format=torch.channels_last) and not like.is_contiguous():
        return out.contiguous(memory_format=torch.channels_last)
    return out


class FusedShortcutA(nn.Module):
    """Option A per model: subsample by ``stride``, zero-pad each model's channels at both ends."""

    def __init__(self, models: int, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.models, self.in_channels, self.out_channels, self.stride = models, in_channels, out_channels, stride
        extra = out_channels - in_channels
        self.pad_front, self.pad_back = extra // 2, extra - extra // 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if not (self.pad_front or self.pad_back):
            return x
        n, _, h, w = x.shape
        per_model = x.reshape(n, self.models, self.in_channels, h, w)
        padded = F.pad(per_model, (0, 0, 0, 0, self.pad_front, self.pad_back))
        return keep_layout(padded.reshape(n, self.models * self.out_channels, h, w), x)


class FusedBasicBlock(nn.Module):
    def __init__(self, models: int, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = grouped_conv3x3(models, in_channels, out_channels, stride)
        self.bn1 = nn.BatchNorm2d(models * out_channels)
        self.conv2 = grouped_conv3x3(models, out_channels, out_channels)
        self.bn2 = nn.BatchNorm2d(models * out_channels)
        needs_projection = stride != 1 or in_channels != out_channels
        self.shortcut = FusedShortcutA(models, in_channels, out_channels, stride) if needs_projection else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class FusedCifarResNet(nn.Module):
    """``models`` CifarResNets of ``blocks_per_stage`` blocks a stage, fed one batch."""

    def __init__(self, models: int, blocks_per_stage: int, in_channels: int = 3, num_classes: int = 10):
        super().__init__()
        self.models = models
        self.conv1 = nn.Conv2d(in_channels, models * STAGE_WIDTHS[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(models * STAGE_WIDTHS[0])
        stages, width = [], STAGE_WIDTHS[0]
        for index, out_width in enumerate(STAGE_WIDTHS):
            stride = 1 if index == 0 else 2
            blocks = [FusedBasicBlock(models, width, out_width, stride)]
            blocks += [FusedBasicBlock(models, out_width, out_width) for _ in range(blocks_per_stage - 1)]
            stages.append(nn.Sequential(*blocks))
            width = out_width
        self.layer1, self.layer2, self.layer3 = stages
        self.width = width
        self.fc_weight = nn.Parameter(torch.zeros(models, num_classes, width))
        self.fc_bias = nn.Parameter(torch.zeros(models, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        features = x.mean(dim=(2, 3)).reshape(x.shape[0], self.models, self.width)  # N x K x 64
        return torch.einsum("nkc,koc->kno", features, self.fc_weight) + self.fc_bias[:, None, :]

    def split(self, tensors: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """Tensors named after this model's (its state, its gradients) as K CifarResNet state
        dicts of views: what each model of the lockstep job reads and writes in place."""
        return split_state(tensors, self.models)

    @classmethod
    def from_models(cls, models: Sequence[nn.Module], blocks_per_stage: int) -> FusedCifarResNet:
        """The fused model holding these CifarResNets' parameters and BatchNorm statistics."""
        first = models[0].state_dict()
        fused = cls(
            len(models),
            blocks_per_stage,
            in_channels=first["conv1.weight"].shape[1],
            num_classes=first["fc.weight"].shape[0],
        )
        fused.load_state_dict(merge_states([m.state_dict() for m in models]))
        return fused.to(first["conv1.weight"].device)


def fuse_cifar_resnets(models: Sequence[CifarResNet]) -> FusedCifarResNet:
    """The declared fused form of K built CifarResNets of one depth (``contracts.ArchitectureInfo``)."""
    return FusedCifarResNet.from_models(models, len(models[0].layer1))


def merge_states(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """K CifarResNet state dicts (or any per-parameter tensors named alike, such as gradients or
    momentum buffers) as the fused model's."""
    merged: dict[str, torch.Tensor] = {}
    for key, first in states[0].items():
        parts = [state[key] for state in states]
        if key in ("fc.weight", "fc.bias"):
            merged[HEAD_WEIGHT if key == "fc.weight" else HEAD_BIAS] = torch.stack(parts)
        elif first.dim() == 0:  # num_batches_tracked: the same count in every model
            merged[key] = first.clone()
        else:
            merged[key] = torch.cat(parts)
    return merged


def split_state(state: dict[str, torch.Tensor], models: int) -> list[dict[str, torch.Tensor]]:
    """The fused model's tensors (parameters, buffers, or anything named after its parameters)
    as ``models`` CifarResNet state dicts: the inverse of ``merge_states``."""
    split: list[dict[str, torch.Tensor]] = [{} for _ in range(models)]
    for key, value in state.items():
        if key in (HEAD_WEIGHT, HEAD_BIAS):
            name, parts = ("fc.weight" if key == HEAD_WEIGHT else "fc.bias"), list(value.unbind(0))
        elif value.dim() == 0:
            name, parts = key, [value] * models
        else:
            name, parts = key, list(value.chunk(models))
        for one, part in zip(split, parts, strict=True):
            one[name] = part
    return split


def lockstep_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The sum over models of each model's mean cross-entropy on the one batch."""
    models = outputs.shape[0]
    return F.cross_entropy(outputs.flatten(0, 1), targets.repeat(models)) * models
