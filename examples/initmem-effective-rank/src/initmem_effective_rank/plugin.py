"""The initmem plugin: registers ``--metric effective-rank``.

Imports nothing heavy: the factory is an import string, resolved only when a run builds it.
"""

from initmem_core import hookimpl

INITMEM_API = ">=1.0,<2"


@hookimpl
def initmem_register_metrics(register):
    register(
        "effective-rank",
        "initmem_effective_rank.metric:EffectiveRank",
        "Effective rank of each Conv/Linear kernel, of its change W - W0, and relative to W0",
    )
