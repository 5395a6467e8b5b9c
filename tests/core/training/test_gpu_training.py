"""The CUDA paths of one run, tested on a CPU against a fake of what they call in ``torch.cuda``:
the run's own device made current, the divergence guard's copy behind an event on that device's
stream, the exact step of a non-finite loss however late the host sees it, the CUDA generator
of the run's device alone in a checkpoint (resumable with fewer GPUs, or none), final weights
saved on the CPU, and cuBLAS's deterministic workspace. ``pytest -k "cuda or gpu"`` selects them."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

from initmem_core import Diverged, hookimpl
from initmem_core.errors import ConfigError
from initmem_core.plugin_system.loader import load_registry, set_registry
from initmem_core.tracking.tracker import MemoryTracker
from initmem_core.training import divergence, loop, runner, setup, state


class FakeCuda:
    """Just enough of ``torch.cuda`` for the code under test: ``count`` GPUs, a current device,
    one stream per device, events whose completion the test decides, a generator per GPU."""

    def __init__(self, count: int):
        self.count, self.current = count, 0
        self.events: list[FakeEvent] = []
        self.rng = {i: torch.full((16,), i, dtype=torch.uint8) for i in range(count)}
        self.rng_set: list[tuple[int, torch.Tensor]] = []
        self.pinned_on: list[int] = []

    def install(self, monkeypatch) -> FakeCuda:
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "is_available", lambda: self.count > 0)
        monkeypatch.setattr(cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(cuda, "device_count", lambda: self.count)
        monkeypatch.setattr(cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(cuda, "set_device", self.set_device)
        monkeypatch.setattr(cuda, "device", self.device)
        monkeypatch.setattr(cuda, "current_stream", lambda device=None: ("stream", self.index(device)))
        monkeypatch.setattr(cuda, "stream", lambda stream: contextlib.nullcontext())
        monkeypatch.setattr(cuda, "Event", lambda: self.new_event())
        monkeypatch.setattr(cuda, "get_rng_state", lambda device="cuda": self.rng[self.index(device)].clone())
        monkeypatch.setattr(cuda, "set_rng_state", self.set_rng_state)
        monkeypatch.setattr(torch.Tensor, "pin_memory", lambda tensor: self.pin_memory(tensor))
        return self

    def index(self, device) -> int:
        if device is None or isinstance(device, str) and device == "cuda":
            return self.current
        device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        return self.current if device.index is None else device.index

    def set_device(self, device) -> None:
        index = self.index(device)
        if index >= self.count:
            raise RuntimeError(f"CUDA error: invalid device ordinal {index}")
        self.current = index

    @contextlib.contextmanager
    def device(self, device):
        before, self.current = self.current, self.index(device)
        try:
            yield
        finally:
            self.current = before

    def pin_memory(self, tensor):
        self.pinned_on.append(self.current)
        return tensor

    def new_event(self):
        self.events.append(FakeEvent())
        return self.events[-1]

    def set_rng_state(self, state, device="cuda") -> None:
        index = self.index(device)
        if index >= self.count:  # what torch raises for a generator index it does not have
            raise IndexError("list index out of range")
        self.rng_set.append((index, state))


class FakeEvent:
    def __init__(self):
        self.stream = None
        self.done = False

    def record(self, stream=None):
        self.stream = stream

    def query(self) -> bool:
        return self.done


# -- the run's device ---------------------------------------------------------------------------


def test_a_run_on_cuda_n_makes_that_gpu_its_current_device(monkeypatch):
    fake = FakeCuda(8).install(monkeypatch)
    assert setup.use_device(torch.device("cuda", 5)) == torch.device("cuda", 5)
    assert fake.current == 5
    fake.current = 2
    assert setup.use_device(torch.device("cuda")) == torch.device("cuda", 2)  # plain cuda: the current one
    assert setup.use_device(torch.device("cpu")) == torch.device("cpu") and fake.current == 2


# -- the divergence guard -------------------------------------------------------------------------


def test_the_divergence_guard_copies_behind_an_event_on_the_run_gpus_own_stream(monkeypatch):
    fake = FakeCuda(8).install(monkeypatch)
    copy = divergence.HostCopy(torch.device("cuda", 3), torch.zeros((), dtype=torch.int64))
    assert fake.pinned_on == [3]  # pinned while GPU 3's context is current, not GPU 0's
    assert fake.current == 0
    copy.start(torch.tensor(7))
    assert fake.events[-1].stream == ("stream", 3)
    assert not copy.ready()
    fake.events[-1].done = True
    assert copy.ready() and copy.value() == 7


class LateCopy:
    """A copy to the host that arrives ``lag`` polls after it was started, as from a busy GPU."""

    def __init__(self, lag: int):
        self.lag, self.copied, self.polls, self.source, self.host = lag, None, 0, None, None

    def start(self, source):
        self.copied, self.polls, self.source = True, 0, source

    def ready(self):
        self.polls += 1
        if self.polls > self.lag:
            self.host = int(self.source)
        return self.copied is None or self.polls > self.lag

    def value(self):
        return self.host


def test_a_gpu_guard_that_sees_a_nan_late_still_names_the_step_it_happened():
    guard = divergence.LossGuard(torch.device("cpu"), start=10)
    guard.copy = LateCopy(lag=3)
    losses = [1.0, 2.0, math.nan, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    tripped_at = next(i for i, loss in enumerate(losses, start=11) if guard.tripped(torch.tensor(loss)))
    assert tripped_at > 13  # noticed late...
    assert guard.bad_step() == 13  # ...but the step is the one whose loss was NaN


def test_a_training_run_on_a_gpu_reports_the_nan_step_not_the_step_it_noticed(monkeypatch):
    """The loop's Diverged carries the guard's step: the 6th step's loss is the first NaN."""

    class PoisonAfter(torch.optim.SGD):
        steps = 0

        def step(self, closure=None):
            super().step(closure)
            PoisonAfter.steps += 1
            if PoisonAfter.steps == 5:  # the 6th forward pass sees a NaN weight
                with torch.no_grad():
                    next(p for p in self.param_groups[0]["params"] if p.ndim == 4).view(-1)[0] = math.nan

    class Plugin:
        @hookimpl
        def initmem_register_optimizers(self, register):
            register("nan-at-step-6", lambda model, config: PoisonAfter(model.parameters(), lr=0.05))

    set_registry(load_registry(entry_points=False, extra_plugins=[("poison", Plugin())]))
    real_guard = loop.LossGuard

    def late_guard(device, start=0):
        guard = real_guard(device, start)
        guard.copy = LateCopy(lag=2)
        return guard

    monkeypatch.setattr(loop, "LossGuard", late_guard)
    import initmem_core

    with pytest.raises(Diverged) as raised:
        initmem_core.run(
            opt="nan-at-step-6",
            epochs=3,
            train_size=128,
            batch_size=32,
            threads=1,
            eval_batch_size=512,
            tracking=False,
            checkpoint_every=0,
        )
    assert raised.value.step == 6 and raised.value.epoch == 2


# -- checkpoints: the run's own CUDA generator -----------------------------------------------------


def test_a_gpu_checkpoint_keeps_only_the_run_devices_generator(monkeypatch):
    FakeCuda(8).install(monkeypatch)
    captured = state.capture_rng(torch.device("cuda", 5))
    assert torch.equal(captured["cuda"], torch.full((16,), 5, dtype=torch.uint8))


def test_a_checkpoint_from_an_8_gpu_worker_resumes_where_one_gpu_is_visible(monkeypatch):
    fake = FakeCuda(8).install(monkeypatch)
    captured = state.capture_rng(torch.device("cuda", 5))
    fake.count, fake.current = 1, 0  # a 1-GPU Slurm or Ray task
    state.restore_rng(captured, torch.device("cuda", 0))
    assert fake.rng_set == [(0, captured["cuda"])]


def test_an_earlier_format_gpu_checkpoint_with_every_gpus_state_resumes_on_one_gpu(monkeypatch):
    fake = FakeCuda(8).install(monkeypatch)
    captured = state.capture_rng(None)
    captured["cuda"] = [fake.rng[i].clone() for i in range(8)]  # what get_rng_state_all saved
    fake.count = 1
    state.restore_rng(captured, torch.device("cuda", 0))
    assert [index for index, _ in fake.rng_set] == [0]


def test_a_gpu_checkpoint_resumes_on_a_cpu_only_machine(monkeypatch):
    fake = FakeCuda(8).install(monkeypatch)
    captured = state.capture_rng(torch.device("cuda", 1))
    fake.count = 0
    state.restore_rng(captured, torch.device("cpu"))
    assert fake.rng_set == []
    assert torch.equal(torch.get_rng_state(), captured["torch"])


# -- final weights --------------------------------------------------------------------------------


class CudaTensor:
    """Stands for a tensor on a GPU: only ``.cpu()`` turns it into one a CPU machine loads."""

    device = torch.device("cuda", 0)

    def __init__(self, value: torch.Tensor):
        self.value = value

    def detach(self):
        return self

    def cpu(self):
        return self.value.clone()


def test_final_weights_of_a_gpu_run_are_saved_on_the_cpu(tmp_path):
    class GpuModel(torch.nn.Module):
        def state_dict(self, *args, **kwargs):
            return {"conv.weight": CudaTensor(torch.ones(2, 2)), "bn.running_var": CudaTensor(torch.zeros(2))}

    class Setup:
        metrics: dict = {}
        model = GpuModel()

    loaded = {}

    class Tracker(MemoryTracker):
        def log_artifact(self, path):
            loaded.update(torch.load(path, weights_only=True))  # as a CPU-only machine would

    runner._log_final_artifacts(Tracker(), Setup())
    assert set(loaded) == {"conv.weight", "bn.running_var"}
    assert all(t.device.type == "cpu" for t in loaded.values())
    assert torch.equal(loaded["conv.weight"], torch.ones(2, 2))


# -- deterministic cuBLAS -------------------------------------------------------------------------


def test_cuda_processes_get_cublas_deterministic_workspace_before_cuda_starts(kept_settings):
    import os

    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)  # kept_settings puts the variable back as it was
    setup.prepare_cuda_environment()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == setup.CUBLAS_WORKSPACE
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
    setup.prepare_cuda_environment()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"  # the user's choice stands


def test_a_deterministic_cuda_run_after_cuda_started_without_the_workspace_is_refused(monkeypatch, kept_settings):
    FakeCuda(1).install(monkeypatch)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    with pytest.raises(ConfigError, match="CUBLAS_WORKSPACE_CONFIG=:4096:8"):
        setup.use_determinism(True, torch.device("cuda", 0))
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    setup.use_determinism(True, torch.device("cuda", 0))
    assert torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.benchmark


def test_cudnn_benchmarks_gpu_convolutions_unless_deterministic(kept_settings):
    setup.use_determinism(False, torch.device("cpu"))
    assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.deterministic
    setup.use_determinism(True, torch.device("cpu"))
    assert not torch.backends.cudnn.benchmark and torch.backends.cudnn.deterministic
