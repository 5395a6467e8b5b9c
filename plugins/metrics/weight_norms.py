"""Radial memory: how far the kernels are from their initialization, in norm and direction.

W is the concatenation of every conv and linear kernel (the parameters sigma scales); biases
and BatchNorm affine parameters are left out, since sigma never touches them.
"""

from __future__ import annotations

import io

import torch

from initmem_plugins.initializers.kernels import kernel_parameters


class WeightNorms:
    def __init__(self) -> None:
        self.rows: list[tuple[int, str, float, float, float, float]] = []

    def compute(self, state) -> dict[str, float]:
        names, weights = zip(*kernel_parameters(state.model))
        initial = [state.initial_params[name] for name in names]
        with torch.no_grad():
            w = torch.stack(torch._foreach_norm(weights))
            w0 = torch.stack(torch._foreach_norm(initial))
            d = torch.stack(torch._foreach_norm(torch._foreach_sub(weights, initial)))
            dot = torch.stack([torch.sum(a * b) for a, b in zip(weights, initial)])
            total_w, total_w0 = w.square().sum().sqrt(), w0.square().sum().sqrt()
            totals = torch.stack([
                total_w, total_w / total_w0, d.square().sum().sqrt() / total_w0,
                dot.sum() / (total_w * total_w0),
            ])
            per_layer = torch.stack([w, w / w0, d / w0, dot / (w * w0)], dim=1)
        # One host sync for all the numbers of this evaluation point.
        totals, per_layer = totals.tolist(), per_layer.tolist()
        self.rows.extend((state.epoch, name, *row) for name, row in zip(names, per_layer))
        return dict(zip(("weight_norm", "weight_norm_ratio", "init_distance", "init_cosine"), totals))

    def artifacts(self) -> dict[str, str]:
        out = io.StringIO()
        out.write("epoch,layer,weight_norm,weight_norm_ratio,init_distance,init_cosine\n")
        for epoch, name, *values in self.rows:
            out.write(f"{epoch},{name}," + ",".join(f"{v:.8g}" for v in values) + "\n")
        return {"layer_norms.csv": out.getvalue()}
