"""Built-in architectures.

Factories are import strings, so registering (and ``initmem plugins``) imports no torch; the
module holding a factory is imported only when a model is built. The CIFAR ResNets declare their
fused form (K models as one grouped network: a lockstep sweep trains a sigma group so); ResNet-9
and timm's models declare none yet, so they are never fused.
"""

from __future__ import annotations

from initmem_core import hookimpl

_CIFAR_RESNET = "initmem_plugins.architectures.cifar_resnet"

#: CIFAR ResNet name -> blocks per stage (depth = 6n + 2).
CIFAR_RESNET_DEPTHS = {"resnet20": 3, "resnet32": 5, "resnet44": 7, "resnet56": 9, "resnet110": 18}


@hookimpl
def initmem_register_architectures(register):
    register(
        "resnet9",
        "initmem_plugins.architectures.resnet9:build_resnet9",
        "Myrtle/DAWNBench ResNet-9 (6.57M params on CIFAR-10), global max pool, logits x 0.125",
    )
    for name, blocks in CIFAR_RESNET_DEPTHS.items():
        register(
            name,
            f"{_CIFAR_RESNET}:build_{name}",
            f"CIFAR ResNet-{6 * blocks + 2} (He et al. 2016), {blocks} blocks/stage, option-A shortcuts",
            fused=f"{_CIFAR_RESNET.replace('cifar_resnet', 'fused_cifar_resnet')}:fuse_cifar_resnets",
        )
    register(
        "timm:*",
        "initmem_plugins.architectures.timm_models:build_timm_model",
        "Any timm model, e.g. timm:resnet18 (random init, no pretrained weights)",
    )
