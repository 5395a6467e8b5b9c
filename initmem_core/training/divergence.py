"""Divergence: a non-finite training loss or weight ends the run at once, recorded as such.

The loss is checked every step without a host sync per step: each step ANDs ``isfinite(loss)``
into a flag that stays on the device. On a CPU the flag is read at once (there is no queue to
drain; on MPS that read does wait for the device). On CUDA it is copied to pinned host memory behind an event and read only once that
event has completed, so the loop notices a few steps late but never waits for the GPU. The
weights and BatchNorm buffers are checked at each logging point (epoch end), before anything
of that epoch is logged, so the last metrics logged are finite.
"""

from __future__ import annotations

import torch

from initmem_core.errors import Diverged

__all__ = ["Diverged", "LossGuard", "all_finite"]


class LossGuard:
    def __init__(self, device: torch.device):
        self.finite = torch.ones((), dtype=torch.bool, device=device)
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.host = torch.ones((), dtype=torch.bool).pin_memory()
            self.copied: torch.cuda.Event | None = None

    def tripped(self, loss: torch.Tensor) -> bool:
        """Add this step's loss; true once a non-finite loss has been seen."""
        self.finite &= torch.isfinite(loss.detach())
        if not self.cuda:
            return not bool(self.finite)
        if self.copied is not None:
            if not self.copied.query():
                return False  # the last copy is still on its way: look again next step
            if not bool(self.host):
                return True
        self.host.copy_(self.finite, non_blocking=True)
        self.copied = torch.cuda.Event()
        self.copied.record()
        return False


@torch.no_grad()
def all_finite(model: torch.nn.Module) -> bool:
    """Weights and floating buffers (BatchNorm statistics) all finite; one host sync."""
    tensors = [t for t in model.state_dict().values() if t.is_floating_point()]
    return bool(torch.stack([t.isfinite().all() for t in tensors]).all())
