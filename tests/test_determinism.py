"""Same config, seed and thread count on CPU: the same bits, weights and metrics alike."""

from __future__ import annotations

import pytest
import torch

import initmem_core
from initmem_core.tracking.tracker import MemoryTracker

# Momentum and augmentation, so optimizer state and every random stream take part.
SMALL = dict(
    data="digits",
    arch="resnet20",
    train_size=128,
    batch_size=32,
    epochs=2,
    threads=1,
    eval_batch_size=512,
    augment="on",
    momentum=0.9,
)


def weights(result) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in result.model.state_dict().items()}


def same_bits(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> bool:
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


@pytest.fixture
def restore_determinism():
    yield
    torch.use_deterministic_algorithms(False)


def test_same_seed_gives_the_same_bits_and_another_seed_does_not():
    first, again, other = (initmem_core.run(seed=seed, tracking=False, **SMALL) for seed in (0, 0, 1))
    assert first.history == again.history
    assert same_bits(weights(first), weights(again))  # BatchNorm buffers included
    assert first.history[1:] != other.history[1:]
    assert not same_bits(weights(first), weights(other))


def test_deterministic_mode_is_logged_switches_torch_and_keeps_cpu_bits(restore_determinism):
    tracker = MemoryTracker()
    strict = initmem_core.run(deterministic=True, tracker=tracker, **SMALL)
    assert tracker.params["deterministic"] is True
    assert torch.are_deterministic_algorithms_enabled()
    plain = initmem_core.run(deterministic=False, tracking=False, **SMALL)
    assert not torch.are_deterministic_algorithms_enabled()  # follows each run's config
    assert strict.history == plain.history and same_bits(weights(strict), weights(plain))
