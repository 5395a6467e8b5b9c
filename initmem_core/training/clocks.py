"""The forgetting clocks of the paper, accumulated once per optimizer step.

With eta_k the *effective* step of the optimizer at step k, b the batch size and lambda every
force that shrinks the weights:

- ``T_SGD   = sum_k eta_k**2 / b``   finite-step / minibatch-noise effects
- ``T_L2    = lambda * sum_k eta_k`` explicit norm decay
- ``T_adapt = sum_k eta_k``          adaptive preconditioning

eta follows the optimizer's declared convention (``contracts.OptimizerInfo``: ``heavy-ball``,
``lr * (1 - dampening) / (1 - momentum)``, since backward-error analysis of heavy-ball and
Nesterov momentum beta gives a gradient flow with step ``lr / (1 - beta)``; or ``lr``), through
the run's ``StepRule`` (settled by ``training.plan``); ``effective_step`` reads a param group the same way, for
``testing.check_optimizer``.

lambda = the coupled ``--l2`` coefficient (when its regularizer is built) + ``--weight-decay``,
coupled or decoupled: a decoupled step ``W <- (1 - lr*lambda) W`` shrinks by the same lambda*eta.
T_L2 uses the same effective eta (a coupled decay passes through the momentum buffer too).

The rates are host-side floats, so ticking a clock never synchronises with the device. ``b`` is
the size of the batch actually used at that step (the last batch of an epoch may be smaller).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from initmem_core.errors import ConfigError
from initmem_core.vocabulary import ADAPTIVE_FAMILY, SGD_FAMILY, clock_metric

CONVENTIONS = {
    "heavy-ball": "eta = lr*(1-dampening)/(1-momentum); lambda = l2 + weight_decay",
    "lr": "eta = lr; lambda = l2 + weight_decay",
}
DEFAULT_CONVENTION = "heavy-ball"
#: What a run logs as its convention when its optimizer's plugin declares none: its clocks are counted
#: by ``DEFAULT_CONVENTION``, but the optimizer belongs to no family the claims compare.
UNDECLARED = "undeclared"
#: The family each convention declares: heavy-ball's step is the gradient's (SGD-like); "lr"'s
#: moves each weight by about lr whatever the gradient's scale (adaptive).
CONVENTION_FAMILIES = {"heavy-ball": SGD_FAMILY, "lr": ADAPTIVE_FAMILY}


def check_convention(name: str, optimizer: str) -> str:
    if name not in CONVENTIONS:
        raise ConfigError(
            f"optimizer {optimizer} declares clock convention '{name}'; valid conventions: {', '.join(CONVENTIONS)}"
        )
    return name


def effective_step(group: Mapping[str, Any], convention: str) -> float:
    """The step the clocks count for one optimizer step with param group ``group``."""
    lr = float(group["lr"])
    if convention == "heavy-ball":
        beta = float(group.get("momentum", 0.0) or 0.0)
        dampening = float(group.get("dampening", 0.0) or 0.0) if beta else 0.0
        return lr * (1.0 - dampening) / (1.0 - beta)
    return lr


@dataclass
class ForgettingClocks:
    sgd: float = 0.0
    l2: float = 0.0
    adapt: float = 0.0

    def tick(self, eta: float, batch_size: int, l2: float) -> None:
        """One step of effective size ``eta`` on a batch of ``batch_size``; ``l2``: the total lambda."""
        self.sgd += eta * eta / batch_size
        self.l2 += l2 * eta
        self.adapt += eta

    def as_metrics(self) -> dict[str, float]:
        return {clock_metric(name): value for name, value in asdict(self).items()}


@dataclass(frozen=True)
class StepRule:
    """How the scheduled rate of a step becomes the clocks' effective step ``eta`` and how much of
    it shrinks the weights, as the optimizer declares them. The loop ticks its clocks with ``eta``
    of the multiplier the schedule applies to the step (``schedules.RateSchedule.at``:
    ``lr_multiplier(step)``) and ``training.horizons`` replays the same calls, so a run and its
    ``--until`` plan count alike by construction."""

    lr: float  # the peak rate (the param group's initial lr)
    convention: str = DEFAULT_CONVENTION  # heavy-ball: eta = lr*(1-dampening)/(1-momentum); lr: eta = lr
    momentum: float = 0.0
    dampening: float = 0.0
    shrink: float = 0.0  # lambda = --l2 (when its regularizer is built) + --weight-decay

    def eta(self, multiplier: float) -> float:
        """The effective step at schedule multiplier ``multiplier``: ``effective_step`` of the
        param group the scheduler makes (``lr * multiplier``) with the declared momentum."""
        group = {"lr": self.lr * multiplier, "momentum": self.momentum, "dampening": self.dampening}
        return effective_step(group, self.convention)
