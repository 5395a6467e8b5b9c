"""Names every layer shares, spelled here once and imported everywhere else. Imports nothing, so
config, training, tracking, report and the CLI may all import it.

The forgetting clocks: what a run logs each clock as, its symbol in the paper, and the formula a
plot's axis shows.

eta is the effective step (eta/(1-beta) for heavy-ball momentum); lambda is every force that
shrinks the weights (see ``initmem_core.training.clocks``).
"""

from __future__ import annotations

#: The metric each clock is logged as: T_SGD, T_L2 and T_adapt, in the paper's order.
CLOCK_SGD, CLOCK_L2, CLOCK_ADAPT = "clock_sgd", "clock_l2", "clock_adapt"
CLOCKS = (CLOCK_SGD, CLOCK_L2, CLOCK_ADAPT)

#: The paper's symbol for each clock, as messages and tables name it.
CLOCK_SYMBOLS = {CLOCK_SGD: "T_SGD", CLOCK_L2: "T_L2", CLOCK_ADAPT: "T_adapt"}

#: The symbol with its definition, for a plot's axis.
CLOCK_FORMULAS = {CLOCK_SGD: "T_SGD = Σ η² / b", CLOCK_L2: "T_L2 = λ Σ η", CLOCK_ADAPT: "T_adapt = Σ η"}


def clock_metric(short: str) -> str:
    """``"sgd"`` -> ``"clock_sgd"``: the metric of a ``ForgettingClocks`` field."""
    name = f"clock_{short}"
    if name not in CLOCKS:
        raise KeyError(name)
    return name
