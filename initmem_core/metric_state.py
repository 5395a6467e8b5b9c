"""What a metric plugin sees at each evaluation point."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from .config import RunConfig
    from .data import DatasetBundle


@dataclass
class EvalState:
    """Passed to ``metric.compute(state)`` at epoch 0 (the initialization) and after each epoch.

    ``initial_params`` maps every parameter name to its value at initialization (W0), on the
    training device. ``history`` holds the metric dicts already logged, one per epoch.
    ``evaluate(split)`` returns ``(loss, accuracy)`` of the current model on ``"train"``,
    ``"val"`` or ``"test"`` (an extra pass: use sparingly).
    """

    model: "torch.nn.Module"
    initial_params: dict[str, "torch.Tensor"]
    epoch: int
    history: list[dict[str, float]]
    config: "RunConfig"
    dataset: "DatasetBundle"
    device: "torch.device"
    evaluate: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
