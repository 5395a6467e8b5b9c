"""Built-in optimizers: ``sgd``, ``adam``, ``adamw``, ``muon`` and the ``timm:*`` family.

This module only *registers* them; the factories live in ``builtin`` and are named by import
string, so listing plugins or validating ``--opt`` never imports torch or timm.
"""

from __future__ import annotations

from initmem_core import hookimpl

_BUILTIN = "initmem_plugins.optimizers.builtin"


@hookimpl
def initmem_register_optimizers(register):
    register("sgd", f"{_BUILTIN}:build_sgd",
             "torch SGD; momentum 0 unless --momentum; --weight-decay is coupled (added to the gradient)")
    register("adam", f"{_BUILTIN}:build_adam",
             "torch Adam; --weight-decay is coupled L2 (passes through the preconditioner)")
    register("adamw", f"{_BUILTIN}:build_adamw",
             "torch AdamW; --weight-decay is decoupled")
    register("muon", f"{_BUILTIN}:build_muon",
             "timm Muon (flattened conv kernels); 1-D params and the classifier head use its AdamW fallback")
    register("timm:*", f"{_BUILTIN}:build_timm",
             "Any timm optimizer by name, e.g. timm:lion (timm.optim.create_optimizer_v2)")
