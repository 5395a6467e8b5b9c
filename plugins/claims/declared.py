"""The paper's claims as they are declared: their margins (fixed before any run), their statements
and what each declares beside its evaluator (``initmem_core.contracts.ClaimInfo``). Importing this
module imports no evaluator: ``initmem plugins`` lists the claims from it; ``paper.py`` evaluates them.

docs/PREREGISTRATION.md holds the margins too, and a test keeps the two equal.
"""

from __future__ import annotations

from initmem_core.contracts import ClaimInfo
from initmem_core.report.claim_groups import OPTIMIZER_AXIS
from initmem_core.vocabulary import CLOCK_ADAPT, CLOCK_L2, CLOCK_SGD

#: What a family of groups sharing a mechanism may differ in: the settings the clocks account for.
FAMILY_FREE = ("lr", "batch_size", "momentum", "l2", "weight_decay", "epochs", "until")

#: The paper these claims test.
SOURCE = (
    "Das, Beneventano, Dey, McKinley, Poggio (2026), Do Deep Networks Forget Initialization? "
    "A Forgetting-Time View of Practical Inductive Bias (docs/PAPER.md)"
)

#: The margins (``paper.py``'s docstring): fixed before any run.
FORGOTTEN_SHARE = 0.25
KEPT_AT_LEAST = 0.75
COUPLED_AT_MOST, CONVERGED_AT_LEAST = 0.25, 0.75
#: The earlier non-inferiority of longer training, kept as a note beside the claim.
KEPT_HALF = 0.5
#: Training longer: the longer horizon at least this many times the shorter (in T_SGD, same rate and batch).
LONGER = 5.0
#: A larger learning rate: at least this many times the smaller one, at the same batch and horizon.
LARGER_LR = 3.0
#: Low-rate SGD is a clock, not a rank: plain SGD whose T_SGD ends at most this share of its forgetting
#: threshold (``regime.CLOCK_THRESHOLDS``: 0.3 of 3). The paper's low-rate SGD ends at T_SGD 0.03, 1% of
#: the threshold; a tenth keeps an order of magnitude between the remembering baseline and a rate whose
#: noise has run its clock out (the rate claim's larger rate, T_SGD 3.3 in confirm-mini-rate).
LOW_RATE_SHARE = 0.1
#: Two groups trained the same number of steps: their T_adapt (the sum of their steps' rates, at one
#: rate) within this relative tolerance (the batch claim's equal-steps read).
EQUAL_STEPS = 0.05

FORGETS_MARGIN = (
    f"forgets: debiased spread below {FORGOTTEN_SHARE:.0%} of low-rate SGD's in the same stratum "
    "(one-sided equivalence at 2.5%)"
)
L2_AXIS = ("l2", "reg", "weight_decay")

#: Each claim's statement, in the report's order (its name is its evaluator's in ``paper.py``).
STATEMENTS = {
    "sgd_remembers_more_than_adaptive": "SGD's spread is larger than each adaptive optimizer's",
    "adaptive_optimizers_forget": (
        f"Adaptive optimizers forget: each one's debiased spread is below {FORGOTTEN_SHARE:.0%} of low-rate SGD's"
    ),
    "l2_shrinks_sgd_spread": "L2 shrinks SGD's spread",
    "l2_brings_spread_near_zero": (
        f"The strongest L2 brings SGD's spread near zero: below {FORGOTTEN_SHARE:.0%} of plain SGD's"
    ),
    "larger_batch_increases_spread": (
        "A larger batch increases low-rate SGD's spread, at equal epochs and at equal steps (each read labelled)"
    ),
    "norms_coupled_for_sgd_not_adaptive": (
        f"SGD's final ||W||_F stays coupled to sigma (at most {COUPLED_AT_MOST:.0%} of the initial log ratio "
        f"forgotten); each adaptive optimizer's converges (at least {CONVERGED_AT_LEAST:.0%})"
    ),
    "spread_orders_by_clock_within_family": (
        "Within one optimizer family, the larger the family's clock, the smaller the debiased spread"
    ),
    "forgetting_follows_the_clocks": (
        "Forgetting follows the clocks, not the epochs: radial half-lives agree better in the mechanism's "
        "clock than in epochs"
    ),
    "longer_training_keeps_sgd_memory": (
        f"Training {LONGER:g}x longer does not reduce low-rate SGD's memory: its debiased spread stays above zero "
        f"and keeps at least {KEPT_AT_LEAST:.0%} of the shorter horizon's"
    ),
    "larger_lr_makes_sgd_forget": (
        f"A larger learning rate ({LARGER_LR:g}x or more, same epochs) makes SGD forget: a smaller debiased spread"
    ),
    "deep_nets_fail_to_interpolate": (
        "Deeper nets at the largest sigma interpolate in fewer runs than the shallowest by the same horizon, "
        "while at the smallest sigma they do"
    ),
    "effective_step_explains_memory": (
        "With the effective step matched across sigma, low-rate SGD's spread falls near zero: below "
        f"{FORGOTTEN_SHARE:.0%} of the plain run's"
    ),
    "sgd_keeps_memory": (
        "Low-rate SGD remembers sigma: its debiased spread is above zero, every run fitting its training set"
    ),
}

#: What each claim declares: the axis it compares, what it decides on, its margin and the clock its
#: mechanism needs (the threshold is ``report.regime.CLOCK_THRESHOLDS``'s).
DECLARED = {
    "sgd_remembers_more_than_adaptive": ClaimInfo(
        OPTIMIZER_AXIS, "SGD's debiased spread − each adaptive optimizer's", "", CLOCK_ADAPT, None, SOURCE
    ),
    "adaptive_optimizers_forget": ClaimInfo(
        OPTIMIZER_AXIS, "0.25 × SGD's debiased spread − each adaptive one's", FORGETS_MARGIN, CLOCK_ADAPT, None, SOURCE
    ),
    "l2_shrinks_sgd_spread": ClaimInfo(
        L2_AXIS, "SGD's debiased spread − that with its strongest L2", "", CLOCK_L2, None, SOURCE
    ),
    "l2_brings_spread_near_zero": ClaimInfo(
        L2_AXIS, "0.25 × SGD's debiased spread − the strongest L2's", FORGETS_MARGIN, CLOCK_L2, None, SOURCE
    ),
    "larger_batch_increases_spread": ClaimInfo(
        ("batch_size", "epochs", "until"),
        "the larger batch's debiased spread − the smaller's, per pair at equal epochs or equal steps",
        "",
        CLOCK_SGD,
        None,
        SOURCE,
    ),
    "norms_coupled_for_sgd_not_adaptive": ClaimInfo(
        OPTIMIZER_AXIS,
        "share of the initial log norm ratio forgotten (per seed) against its margin, per optimizer",
        f"coupled: at most {COUPLED_AT_MOST:.0%}; converged: at least {CONVERGED_AT_LEAST:.0%} (t over seeds)",
        CLOCK_ADAPT,
        None,
        SOURCE,
    ),
    "spread_orders_by_clock_within_family": ClaimInfo(
        FAMILY_FREE, "−Spearman's rho of the family's clock and debiased spread", source=SOURCE
    ),
    "forgetting_follows_the_clocks": ClaimInfo(
        FAMILY_FREE, "−(sd of log radial half-life in the clock − in epochs), per family", source=SOURCE
    ),
    "longer_training_keeps_sgd_memory": ClaimInfo(
        ("epochs", "until"),
        f"the long horizon's debiased spread; long − {KEPT_AT_LEAST:g} × short",
        f"non-inferiority: the long horizon keeps at least {KEPT_AT_LEAST:.0%} of the short one's debiased spread",
        source=SOURCE,
    ),
    "larger_lr_makes_sgd_forget": ClaimInfo(
        ("lr",), "the smaller rate's debiased spread − the larger's", "", CLOCK_SGD, None, SOURCE
    ),
    "deep_nets_fail_to_interpolate": ClaimInfo(
        ("arch",), "differences of the shares of runs that interpolated (Newcombe)", source=SOURCE
    ),
    "effective_step_explains_memory": ClaimInfo(
        ("lr_match_sigma",), "0.25 × plain SGD's debiased spread − the matched one's", FORGETS_MARGIN, source=SOURCE
    ),
    "sgd_keeps_memory": ClaimInfo(OPTIMIZER_AXIS, "low-rate SGD's debiased spread", source=SOURCE),
}
