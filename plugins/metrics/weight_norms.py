"""Radial memory: how far the kernels are from their initialization, in norm and direction.

W is the concatenation of every conv and linear kernel (the parameters sigma scales); biases
and BatchNorm affine parameters are left out, since sigma never touches them.
"""

from __future__ import annotations

import io

import torch

from initmem_core.kernels import kernel_parameters
from initmem_core.vocabulary import WEIGHT_NORMS

COLUMNS = WEIGHT_NORMS


class WeightNorms:
    """Logs the four totals at every evaluation point, and keeps them per layer for
    ``layer_norms.csv``. The per-layer table lives in tensors, not Python rows: it goes into every
    checkpoint, and a long run holds epochs x layers of it."""

    def __init__(self) -> None:
        self.layers: list[str] = []
        self.epochs: list[int] = []
        self.per_layer: list[torch.Tensor] = []  # one [layers, 4] tensor per evaluation point, on the CPU

    def compute(self, state) -> dict[str, float]:
        names, weights = zip(*kernel_parameters(state.model))
        initial = [state.initial_params[name] for name in names]
        with torch.no_grad():
            w = torch.stack(torch._foreach_norm(weights))
            w0 = torch.stack(torch._foreach_norm(initial))
            d = torch.stack(torch._foreach_norm(torch._foreach_sub(weights, initial)))
            dot = torch.stack([torch.sum(a * b) for a, b in zip(weights, initial)])
            total_w, total_w0 = w.square().sum().sqrt(), w0.square().sum().sqrt()
            totals = torch.stack(
                [
                    total_w,
                    total_w / total_w0,
                    d.square().sum().sqrt() / total_w0,
                    (dot.sum() / (total_w * total_w0)).clamp(-1.0, 1.0),  # float32 rounding may pass 1
                ]
            )
            per_layer = torch.stack([w, w / w0, d / w0, (dot / (w * w0)).clamp(-1.0, 1.0)], dim=1)
        # One host sync for all the numbers of this evaluation point.
        on_host = torch.cat([totals, per_layer.reshape(-1)]).cpu()
        self.layers = list(names)
        self.epochs.append(state.epoch)
        self.per_layer.append(on_host[len(COLUMNS) :].view(len(names), len(COLUMNS)))
        return dict(zip(COLUMNS, on_host[: len(COLUMNS)].tolist()))

    def state_dict(self) -> dict:
        table = torch.stack(self.per_layer) if self.per_layer else torch.zeros(0, len(self.layers), len(COLUMNS))
        return {"layers": list(self.layers), "epochs": torch.tensor(self.epochs, dtype=torch.int64), "table": table}

    def load_state_dict(self, state: dict) -> None:
        self.layers = list(state["layers"])
        self.epochs = state["epochs"].tolist()
        self.per_layer = list(state["table"].unbind(0))

    def artifacts(self) -> dict[str, str]:
        out = io.StringIO()
        out.write("epoch,layer," + ",".join(COLUMNS) + "\n")
        for epoch, table in zip(self.epochs, self.per_layer):
            for name, values in zip(self.layers, table.tolist()):
                out.write(f"{epoch},{name}," + ",".join(f"{v:.8g}" for v in values) + "\n")
        return {"layer_norms.csv": out.getvalue()}
