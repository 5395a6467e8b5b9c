"""Effective rank against hand-computable matrices, and the metric in a real initmem run."""

from types import SimpleNamespace

import pytest
import torch
from initmem_effective_rank import plugin
from initmem_effective_rank.metric import EffectiveRank, effective_rank

from initmem_core.testing import check_metric


def test_identity_has_full_effective_rank():
    assert effective_rank(torch.eye(5)).item() == pytest.approx(5.0)


def test_rank_one_and_zero_matrices():
    outer = torch.outer(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, -1.0]))
    assert effective_rank(outer).item() == pytest.approx(1.0, abs=1e-5)
    assert effective_rank(torch.zeros(3, 4)).item() == 0.0


def test_two_unequal_singular_values_by_hand():
    # s = (3, 1): p = (0.75, 0.25), H = -(0.75 ln 0.75 + 0.25 ln 0.25), erank = exp(H)
    p = torch.tensor([0.75, 0.25])
    expected = torch.exp(-(p * p.log()).sum()).item()
    assert effective_rank(torch.diag(torch.tensor([3.0, 1.0]))).item() == pytest.approx(expected)


def test_does_not_change_with_scale():
    matrix = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    assert effective_rank(3.0 * matrix).item() == pytest.approx(effective_rank(matrix).item(), rel=1e-5)


def test_at_the_initialization_the_ratio_is_one_and_there_is_no_update():
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4, 3))
    initial = {name: p.detach().clone() for name, p in model.named_parameters()}
    state = SimpleNamespace(model=model, initial_params=initial, epoch=0, device=torch.device("cpu"))
    figures = EffectiveRank().compute(state)
    assert set(figures) == {"effective_rank", "effective_rank_ratio"}
    assert figures["effective_rank_ratio"] == pytest.approx(1.0)
    assert 0 < figures["effective_rank"] <= 1


def test_a_rank_one_update_is_seen():
    layer = torch.nn.Linear(8, 8, bias=False)
    initial = {"weight": layer.weight.detach().clone()}
    with torch.no_grad():
        layer.weight.add_(torch.outer(torch.ones(8), torch.arange(8.0)))
    state = SimpleNamespace(model=layer, initial_params=initial, epoch=1, device=torch.device("cpu"))
    assert EffectiveRank().compute(state)["update_effective_rank"] == pytest.approx(1 / 8, abs=1e-4)


def test_returns_finite_numbers_in_a_real_run(initmem_registry):
    initmem_registry(plugin)
    check_metric("effective-rank")
