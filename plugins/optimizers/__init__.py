"""Built-in optimizers: ``sgd``, ``adam``, ``adamw``, ``muon`` and the ``timm:*`` family.

This module only *registers* them; the factories live in ``builtin`` and are named by import
string, so listing plugins or validating ``--opt`` never imports torch or timm.

Each declares its defaults: ``lr`` (what ``--lr`` left unset means) and every option
``--opt-arg key=value`` may set. The rates come from a measured lr scan on digits
(docs/lr-scan.md): SGD 0.05 (trains and interpolates; 0.2 fit validation slightly better, but the
paper's SGD is deliberately a low rate), Adam/AdamW 1e-3 (the best validation loss, also the
libraries' default), Muon 0.01 in timm's units (the best validation loss; timm scales Muon's step
by 0.2 * sqrt(max dim) to match AdamW's RMS). ``clock`` says how a step maps to the forgetting
clocks (``initmem_core.training.clocks``): SGD's heavy-ball buffer sums gradients, so its
effective step is eta / (1 - beta); Adam's, AdamW's and Muon's momentum is an average (EMA),
so theirs is eta. ``elementwise``: SGD's, Adam's and AdamW's updates and state are per element
(a lockstep sweep may fuse them); Muon orthogonalizes each matrix, so it declares nothing and is
never fused.
"""

from __future__ import annotations

from initmem_core import hookimpl
from initmem_core.config import EXECUTION_OPT_ARGS

_BUILTIN = "initmem_plugins.optimizers.builtin"
#: How torch's own optimizers execute a step (None: torch chooses, foreach on GPUs).
_EXECUTION = dict.fromkeys(EXECUTION_OPT_ARGS)
_ADAM_DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "amsgrad": False, **_EXECUTION}


@hookimpl
def initmem_register_optimizers(register):
    register(
        "sgd",
        f"{_BUILTIN}:build_sgd",
        "torch SGD; momentum 0 unless --momentum; --weight-decay is coupled (added to the gradient)",
        defaults={"lr": 0.05, "nesterov": False, "dampening": 0.0, **_EXECUTION},
        clock="heavy-ball",
        elementwise=True,
    )
    register(
        "adam",
        f"{_BUILTIN}:build_adam",
        "torch Adam; --weight-decay is coupled L2 (passes through the preconditioner)",
        defaults=_ADAM_DEFAULTS,
        clock="lr",
        elementwise=True,
    )
    register(
        "adamw",
        f"{_BUILTIN}:build_adamw",
        "torch AdamW; --weight-decay is decoupled",
        defaults=_ADAM_DEFAULTS,
        clock="lr",
        elementwise=True,
    )
    register(
        "muon",
        f"{_BUILTIN}:build_muon",
        "timm Muon (flattened conv kernels); 1-D params and the classifier head use its AdamW fallback; "
        "lr in timm's units (step scaled by 0.2*sqrt(max dim))",
        defaults={
            "lr": 0.01,
            "nesterov": False,
            "ns_steps": 5,
            "adjust_lr_fn": "match_rms_adamw",
            "fallback_lr_scale": 1.0,
            "betas": (0.9, 0.95),
            "eps": 1e-7,
        },
        clock="lr",
    )
    register(
        "timm:*",
        f"{_BUILTIN}:build_timm",
        "Any timm optimizer by name, e.g. timm:lion (timm.optim.create_optimizer_v2), with timm's defaults",
        defaults=f"{_BUILTIN}:timm_defaults",
        clock=f"{_BUILTIN}:timm_clock",
    )
