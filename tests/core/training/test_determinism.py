"""Same config, seed and thread count on CPU: the same bits, weights and metrics alike; a sweep's
threads pinned and recorded, the same for one worker as for two."""

from __future__ import annotations

import subprocess

import pytest
import torch

import initmem_core
from initmem_core.errors import ConfigError
from initmem_core.tracking.tracker import MemoryTracker
from initmem_core.training import setup
from tests.support import cli_processes
from tests.support.cli_processes import TINY, children, metric_histories, sweep_command

# Momentum and augmentation, so optimizer state and every random stream take part.
SMALL = {**cli_processes.SMALL, "epochs": 2, "augment": "on", "momentum": 0.9}


def weights(result) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in result.model.state_dict().items()}


def same_bits(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> bool:
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def test_same_seed_gives_the_same_bits_and_another_seed_does_not():
    first, again, other = (initmem_core.run(seed=seed, tracking=False, **SMALL) for seed in (0, 0, 1))
    assert first.history == again.history
    assert same_bits(weights(first), weights(again))  # BatchNorm buffers included
    assert first.history[1:] != other.history[1:]
    assert not same_bits(weights(first), weights(other))


def test_deterministic_mode_is_logged_switches_torch_for_the_run_only_and_keeps_cpu_bits(monkeypatch):
    switched, build = [], setup.build_setup

    def building(plan):
        built = build(plan)
        switched.append(torch.are_deterministic_algorithms_enabled())
        return built

    monkeypatch.setattr(setup, "build_setup", building)
    tracker = MemoryTracker()
    strict = initmem_core.run(deterministic=True, tracker=tracker, **SMALL)
    assert tracker.params["deterministic"] is True
    assert switched == [True] and not torch.are_deterministic_algorithms_enabled()  # back as it was
    plain = initmem_core.run(deterministic=False, tracking=False, **SMALL)
    assert switched == [True, False]  # follows each run's config
    assert strict.history == plain.history and same_bits(weights(strict), weights(plain))


# -- threads do not depend on --workers -------------------------------------------------------


@pytest.mark.slow
def test_threads_are_pinned_recorded_and_never_mixed(tracking_uri, tmp_path):
    grid = {"sigma": [0.5], **{k: v for k, v in TINY.items() if k != "threads"}}
    launch = dict(name="pinned", tracking_uri=tracking_uri, out=tmp_path / "out")
    initmem_core.run_sweep(grid, **launch)
    [child] = children(tracking_uri, "pinned")
    assert child.data.params["threads"] == "1"  # not a share of the machine: the same for any --workers
    with pytest.raises(ConfigError, match=r"computed with --threads 1 in an earlier launch, this one would use 2"):
        initmem_core.run_sweep({**grid, "threads": 2}, **launch)
    from mlflow.tracking import MlflowClient

    parent = MlflowClient(tracking_uri).get_run(child.data.tags["mlflow.parentRunId"])
    assert parent.info.status == "FINISHED" and len(children(tracking_uri, "pinned")) == 1


@pytest.mark.slow(seconds=60)  # two sweeps of real training, one and two workers
def test_one_and_two_workers_give_the_same_bits(tracking_uri, tmp_path):
    for workers in ("1", "2"):
        done = subprocess.run(
            sweep_command(tracking_uri, f"w{workers}", "--workers", workers, "--out", str(tmp_path / workers)),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    one, two = metric_histories(tracking_uri, "w1"), metric_histories(tracking_uri, "w2")
    assert len(one) >= 4 * 14 and one == two
