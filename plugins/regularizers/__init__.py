"""Built-in explicit regularizers: ``l2`` and ``l2-init`` (strength ``--l2``).

Only registration happens here; the classes live in ``builtin`` and are named by import string,
so listing plugins never imports torch.
"""

from __future__ import annotations

from initmem_core import hookimpl

_BUILTIN = "initmem_plugins.regularizers.builtin"


@hookimpl
def initmem_register_regularizers(register):
    register(
        "l2", f"{_BUILTIN}:L2Penalty", "Coupled L2: lambda/2 * sum ||W||^2 added to the loss (gradient lambda * W)"
    )
    register(
        "l2-init",
        f"{_BUILTIN}:L2InitPenalty",
        "Pull toward the initialization: lambda/2 * sum ||W - W0||^2 (a memory-preserving control)",
    )
