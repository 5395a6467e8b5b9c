"""Random number generators in a checkpoint: every generator a run draws from, as tensors so
that ``weights_only`` loading reads them, and put back on resume."""

from __future__ import annotations

import random
from typing import Any


def capture_rng(device: Any = None) -> dict[str, Any]:
    """Every generator a run draws from: torch's CPU one, Python's, NumPy's, and the CUDA one of
    the run's own ``device`` only (other GPUs of the process are not the run's, and a resume may
    see fewer of them)."""
    import numpy
    import torch

    version, state, gauss = random.getstate()
    legacy = numpy.random.get_state(legacy=True)
    assert isinstance(legacy, tuple)  # the global RandomState is an MT19937, whose legacy state is a tuple
    kind, keys, position, has_gauss, cached = legacy
    captured = {
        "torch": torch.get_rng_state(),
        "python": {"version": version, "state": torch.tensor(state, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype("int64")),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
    }
    if device is not None and device.type == "cuda" and torch.cuda.is_initialized():
        captured["cuda"] = torch.cuda.get_rng_state(device)
    return captured


def restore_rng(captured: dict[str, Any], device: Any = None) -> None:
    """Put ``capture_rng``'s generators back; the CUDA state goes to the resumed run's own
    ``device``, whichever GPU that is (a run resumed on the CPU has no CUDA generator to set).
    A checkpoint from before this format holds every GPU's state by index: the run's was the
    current device's, GPU 0 of its process unless it said otherwise."""
    import numpy
    import torch

    torch.set_rng_state(captured["torch"])
    python = captured["python"]
    random.setstate((python["version"], tuple(python["state"].tolist()), python["gauss"]))
    state = captured["numpy"]
    numpy.random.set_state(
        (state["kind"], state["keys"].numpy().astype("uint32"), state["position"], state["has_gauss"], state["cached"])
    )
    cuda = captured.get("cuda")
    if cuda is None or device is None or device.type != "cuda":
        return
    if isinstance(cuda, (list, tuple)):  # the earlier format: one state per visible GPU
        if not cuda:
            return
        cuda = cuda[0]
    torch.cuda.set_rng_state(cuda, device)
