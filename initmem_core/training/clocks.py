"""The forgetting clocks of the paper, accumulated once per optimizer step.

With learning rate eta_k actually applied at step k, batch size b and L2 coefficient lambda:

- ``T_SGD   = sum_k eta_k**2 / b``   finite-step / minibatch-noise effects
- ``T_L2    = lambda * sum_k eta_k`` explicit norm decay
- ``T_adapt = sum_k eta_k``          adaptive preconditioning

The learning rate is a host-side float, so ticking a clock never synchronises with the device.
``b`` is the size of the batch actually used at that step (the last batch of an epoch may be
smaller when the training set is not a multiple of b).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class ForgettingClocks:
    sgd: float = 0.0
    l2: float = 0.0
    adapt: float = 0.0

    def tick(self, lr: float, batch_size: int, l2: float) -> None:
        self.sgd += lr * lr / batch_size
        self.l2 += l2 * lr
        self.adapt += lr

    def as_metrics(self) -> dict[str, float]:
        return {f"clock_{name}": value for name, value in asdict(self).items()}
