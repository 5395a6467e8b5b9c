"""--compile over a sweep: no silent eager fallback (the recompile limit sized per architecture,
every fallback counted, tagged and warned about), a static training graph (the partial last batch
runs eagerly), ResNet-20, 56 and 110 compiled in one process without a fallback, and
``initmem run --compile --tf32 on`` training with Inductor on the CPU."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from typer.testing import CliRunner

import initmem_core
from initmem_cli.app import app
from initmem_core.errors import RunWarning
from initmem_core.tracking.tracker import MemoryTracker
from initmem_core.training import compiling
from initmem_core.vocabulary import COMPILE_FALLBACKS_TAG


@pytest.fixture
def fresh_dynamo(monkeypatch):
    """Dynamo's caches and limit as a new process has them, and as they were after the test.
    The limit is restored by Dynamo's own ``config.patch``: pytest's monkeypatch reads a config
    module's attribute as missing and, on undo, deletes it (every later compile then fails)."""
    name = compiling.limit_name()
    monkeypatch.setattr(compiling, "_architectures", set())
    torch._dynamo.reset()
    with torch._dynamo.config.patch({name: getattr(torch._dynamo.config, name)}):
        yield
    torch._dynamo.reset()


def test_the_recompile_limit_grows_with_the_architectures_compiled_and_never_shrinks(fresh_dynamo):
    name = compiling.limit_name()
    setattr(torch._dynamo.config, name, 8)
    assert compiling.size_recompile_limit("resnet20") == 8
    assert compiling.size_recompile_limit("resnet20") == 8  # a second cell of it needs no more
    assert compiling.size_recompile_limit("resnet56") == 2 * compiling.ENTRIES_PER_ARCHITECTURE
    assert compiling.size_recompile_limit("resnet110") == 3 * compiling.ENTRIES_PER_ARCHITECTURE
    setattr(torch._dynamo.config, name, 100)  # a user's larger limit stays
    assert compiling.size_recompile_limit("resnet9") == 100


def test_a_fallback_to_eager_is_counted(fresh_dynamo):
    compiling.watch_fallbacks()
    setattr(torch._dynamo.config, compiling.limit_name(), 1)
    double = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
    before = compiling.fallbacks()
    double(torch.ones(2))
    assert compiling.fallbacks() == before  # compiled
    assert torch.equal(double(torch.ones(3)), torch.full((3,), 2.0))  # a second shape: over the limit, eager
    assert compiling.fallbacks() == before + 1


def test_the_partial_last_training_batch_runs_eagerly_and_everything_else_compiled():
    model, calls = torch.nn.Linear(2, 1), []
    forward = compiling.StaticBatches(model, lambda x: calls.append(len(x)) or model(x), batch_size=4)
    forward(torch.ones(4, 2))
    forward(torch.ones(3, 2))  # the epoch's last batch: eager
    model.eval()
    forward(torch.ones(3, 2))  # evaluation: always the compiled model
    assert calls == [4, 3]


def test_a_run_is_tagged_with_its_fallbacks_and_warns_of_any(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda model, mode=None: model)
    counts = iter([0, 2])
    monkeypatch.setattr(compiling, "fallbacks", lambda: next(counts))
    tracker = MemoryTracker()
    with pytest.warns(RunWarning, match="gave up compiling 2 time"):
        initmem_core.run(
            compile=True, epochs=1, train_size=64, batch_size=32, threads=1, checkpoint_every=0, tracker=tracker
        )
    assert tracker.tags[COMPILE_FALLBACKS_TAG] == "2"


@pytest.mark.slow(seconds=40)  # Dynamo traces ResNet-110 three ways: tens of seconds
def test_resnet_20_56_and_110_compile_in_one_process_without_falling_back(monkeypatch, fresh_dynamo):
    """A depth sweep in one worker: the three depths share ``CifarResNet.forward``, together more
    cache entries than Dynamo's default limit of 8, and none falls back to eager."""
    counter = CompileCounter()
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, mode=None: real(model, backend=counter))
    setattr(torch._dynamo.config, compiling.limit_name(), 8)  # the default, as a new process has it
    for arch in ("resnet20", "resnet56", "resnet110"):
        tracker = MemoryTracker()
        initmem_core.run(
            arch=arch,
            compile=True,
            epochs=1,
            train_size=40,  # batches 16, 16 and 8: the last one runs eagerly
            batch_size=16,
            eval_batch_size=32,  # each split ends in a smaller batch: evaluation recompiles dynamic once
            eval_size=40,
            threads=1,
            checkpoint_every=0,
            tracker=tracker,
        )
        assert tracker.tags[COMPILE_FALLBACKS_TAG] == "0", arch
    assert counter.frame_count > 8  # the default limit would have been passed


@pytest.mark.slow(seconds=90)  # Inductor generates and compiles C++ for the forward and the backward: a minute
def test_initmem_run_compile_tf32_on_trains_with_inductor_on_the_cpu(fresh_dynamo):
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--compile",
            "--tf32",
            "on",
            "--no-tracking",
            "--epochs",
            "1",
            "--train-size",
            "32",
            "--batch-size",
            "16",
            "--eval-size",
            "32",
            "--threads",
            "1",
            "--checkpoint-every",
            "0",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "test_acc" in result.output or "test" in result.output
