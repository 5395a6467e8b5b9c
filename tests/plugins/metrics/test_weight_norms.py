"""The radial-memory metric (plugins/metrics/weight_norms.py): a cosine stays within [-1, 1]."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from initmem_plugins.metrics.weight_norms import WeightNorms


def test_the_cosine_of_unchanged_weights_is_exactly_1_despite_float32_rounding():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(300, 300, bias=False) for _ in range(4)))
    initial = {name: p.detach().clone() for name, p in model.named_parameters()}
    values = WeightNorms().compute(SimpleNamespace(model=model, initial_params=initial, epoch=0))
    assert values["init_cosine"] <= 1.0 and values["init_cosine"] == 1.0
    assert values["init_distance"] == 0.0
