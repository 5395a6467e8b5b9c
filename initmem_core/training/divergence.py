"""Divergence: a non-finite training loss or weight ends the run at once, recorded as such.

The loss is checked every step without a host sync per step: each step counts itself and, on
the first non-finite loss, keeps that step's number in a tensor that stays on the device. On a
CPU it is read at once (there is no queue to drain; on MPS that read does wait for the device).
On CUDA it is copied to pinned host memory behind an event recorded on the run's own device and
stream, and read only once that event has completed: the loop notices a few steps late but never
waits for the GPU, and the step it reports is still the one whose loss was not finite. The
weights and BatchNorm buffers are checked at each logging point (epoch end), before anything of
that epoch is logged, so the last metrics logged are finite.
"""

from __future__ import annotations

import torch

from initmem_core.errors import Diverged

__all__ = ["Diverged", "HostCopy", "LossGuard", "all_finite"]

NOT_SEEN = -1


class HostCopy:
    """A device scalar's value on the host, copied without waiting: ``start`` queues the copy on
    ``device``'s current stream (the one the step's kernels ran on) behind an event on that same
    stream; ``ready`` says whether the event has completed, after which ``value`` is current."""

    def __init__(self, device: torch.device, like: torch.Tensor):
        with torch.cuda.device(device):  # pinned memory is tied to the current device's context
            self.host = torch.empty_like(like, device="cpu").pin_memory()
        self.stream = torch.cuda.current_stream(device)
        self.copied: torch.cuda.Event | None = None

    def start(self, source: torch.Tensor) -> None:
        with torch.cuda.stream(self.stream):
            self.host.copy_(source, non_blocking=True)
        self.copied = torch.cuda.Event()
        self.copied.record(self.stream)

    def ready(self) -> bool:
        return self.copied is None or self.copied.query()

    def value(self) -> int:
        return int(self.host)


class LossGuard:
    """Watches the training loss of a run on ``device``; ``start`` is the number of steps the
    run had already taken (a resumed run), so steps are numbered from the run's first."""

    def __init__(self, device: torch.device, start: int = 0):
        self.steps = torch.full((), start, dtype=torch.int64, device=device)
        self.first_bad = torch.full((), NOT_SEEN, dtype=torch.int64, device=device)
        self.copy = HostCopy(device, self.first_bad) if device.type == "cuda" else None

    def tripped(self, loss: torch.Tensor) -> bool:
        """Add this step's loss; true once a non-finite loss has been seen (on CUDA, once the
        copy that says so has arrived)."""
        self.steps += 1
        bad = ~torch.isfinite(loss.detach()) & (self.first_bad == NOT_SEEN)
        self.first_bad = torch.where(bad, self.steps, self.first_bad)
        if self.copy is None:
            return int(self.first_bad) != NOT_SEEN
        if not self.copy.ready():
            return False  # the last copy is still on its way: look again next step
        if self.copy.copied is not None and self.copy.value() != NOT_SEEN:
            return True
        self.copy.start(self.first_bad)
        return False

    def bad_step(self) -> int | None:
        """The run's step (1-based) whose loss was first not finite, or ``None``; one host sync."""
        step = int(self.first_bad)
        return None if step == NOT_SEEN else step


@torch.no_grad()
def all_finite(model: torch.nn.Module) -> bool:
    """Weights and floating buffers (BatchNorm statistics) all finite; one host sync."""
    tensors = [t for t in model.state_dict().values() if t.is_floating_point()]
    return bool(torch.stack([t.isfinite().all() for t in tensors]).all())
