"""The initmem plugin: registers ``--opt fromage``.

Imports nothing heavy: the factory is an import string, resolved only when a run builds it.
"""

from __future__ import annotations

from initmem_core import hookimpl


@hookimpl
def initmem_register_optimizers(register):
    register(
        "fromage",
        "initmem_fromage.plugin:build_fromage",
        "Fromage (Bernstein et al. 2020): per-layer step of relative size lr, norm-preserving",
    )


def build_fromage(model, config):
    """``Fromage(trainable params, lr=config.lr)``; it has no momentum or weight decay knob."""
    from initmem_core.errors import ConfigError

    from .optimizer import Fromage

    if config.momentum:
        raise ConfigError(f"fromage has no momentum, got --momentum {config.momentum}; drop --momentum")
    if config.weight_decay:
        raise ConfigError(
            f"fromage has no weight decay, got --weight-decay {config.weight_decay}; "
            "drop it or use --reg l2 --l2 <lambda> instead"
        )
    return Fromage([p for p in model.parameters() if p.requires_grad], lr=config.lr)
