"""The paper's remembering baseline, for claims that compare with it: plain SGD, low rate by its clock.
On initmem's stable surface beside ``initmem_core.report.claim_api`` (docs/plugins.md), for claim plugins
that test the paper's kind of statement ("X forgets what low-rate SGD keeps").
"""

from __future__ import annotations

from initmem_core.config import RunConfig
from initmem_core.report.claim_api import CLOCK_SGD, SGD_FAMILY, Group, Sweep
from initmem_plugins.claims.declared import LOW_RATE_SHARE


def is_plain_sgd(config: RunConfig, family: str) -> bool:
    """SGD-like with no momentum, no L2 and no weight decay: the paper's plain SGD."""
    return family == SGD_FAMILY and config.momentum == 0 and config.l2 + config.weight_decay == 0


def plain_sgd(group: Group) -> bool:
    """Whether ``group`` is plain SGD (``is_plain_sgd``)."""
    return is_plain_sgd(group.config, group.family)


def low_rate_ceiling(sweep: Sweep) -> float:
    """The largest T_SGD a low-rate group ends at: ``LOW_RATE_SHARE`` of the claim's T_SGD threshold."""
    return LOW_RATE_SHARE * sweep.claim.thresholds[CLOCK_SGD]


def low_rate(sweep: Sweep, group: Group) -> bool:
    """Plain SGD whose T_SGD ends far below the threshold of its forgetting (``LOW_RATE_SHARE``): low
    rate by its clock, whatever other rates the sweep holds."""
    return plain_sgd(group) and group.summary.clock_sgd <= low_rate_ceiling(sweep)


def baseline_sgd(sweep: Sweep, groups: list[Group]) -> Group | None:
    """Of a stratum's low-rate SGD groups, the remembering baseline (the paper's, and the claim
    template's): torch's SGD before any other SGD-like plugin, then the lowest rate, then the
    shortest horizon (T_SGD). None without a low-rate group: the claim is not evaluated there."""
    return min(
        (g for g in groups if low_rate(sweep, g)),
        key=lambda g: (g.config.opt != "sgd", g.config.lr, g.summary.clock_sgd),
        default=None,
    )


def low_rate_needs(sweep: Sweep, what: str = "a plain low-rate SGD group") -> str:
    """The groups a claim would need, with what low rate is: "a plain SGD group whose T_SGD ends at most 0.3"."""
    return f"{what} (plain SGD whose T_SGD ends at most {low_rate_ceiling(sweep):.3g}: low rate by its clock)"
