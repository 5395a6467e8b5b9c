"""``--tf32``: TensorFloat-32 set through the one API that every reader in the installed torch
accepts, on every torch ``pyproject.toml`` admits (2.4 to 2.14).

PyTorch has two APIs for it. The legacy flags (``torch.backends.cuda.matmul.allow_tf32``,
``torch.backends.cudnn.allow_tf32``) are all torch < 2.9 has. Torch 2.9 added ``fp32_precision``
(``torch.backends.cuda.matmul.fp32_precision``, ``torch.backends.cudnn.conv.fp32_precision``...)
and, from then on, keeps both: a legacy setter writes the legacy state *and* the new one, but the
new setter writes only the new one, so reading a legacy flag after the new API set it raises
("you have used mix of the legacy and new APIs", ``at::Context::allowTF32CuBLAS``). Inductor
still reads legacy flags: on 2.9-2.11 in general (pytorch issue 166387: compiled runs fail),
and still in 2.14 in its conv templates (``torch.backends.cudnn.allow_tf32``) and on ROCm
(``torch.backends.cuda.matmul.allow_tf32``). So while a torch build has the legacy flags, they
are the ones to set: every reader, legacy or new, then sees one consistent state. The new API is
used only by a build that no longer has the legacy flags.

Decided by feature, not by version number: what the installed ``torch.backends`` holds.
"""

from __future__ import annotations

from typing import Any

from initmem_core.errors import ConfigError

LEGACY, PRECISION = "legacy", "fp32_precision"


def _has(holder: Any, name: str) -> bool:
    """Whether a flag exists, without trusting ``hasattr``: torch's getters raise RuntimeError
    (not AttributeError) for a flag that exists but was last set through the other API."""
    try:
        getattr(holder, name)
    except AttributeError:
        return False
    except RuntimeError:
        return True
    return True


def tf32_api(backends: Any) -> str:
    """``LEGACY`` where ``backends`` (``torch.backends``) has the legacy ``allow_tf32`` flags
    (torch 2.4-2.14: the only API before 2.9, the one every reader accepts after; see the module
    docstring), ``PRECISION`` where it has only ``fp32_precision``."""
    if _has(backends.cuda.matmul, "allow_tf32") and _has(backends.cudnn, "allow_tf32"):
        return LEGACY
    if _has(backends.cuda.matmul, "fp32_precision") and _has(backends.cudnn, "conv"):
        return PRECISION
    raise ConfigError("--tf32: this torch build has neither allow_tf32 nor fp32_precision flags; install torch>=2.4")


def use_precision(tf32: str, backends: Any = None) -> str:
    """``--tf32``: on or off for both fp32 matmuls (cuBLAS) and cuDNN convolutions, set
    explicitly, since PyTorch's defaults differ (cuDNN convolutions default to TF32 on Ampere and
    newer, matmuls to IEEE fp32): off means fp32 everywhere. Returns the API used (``tf32_api``).
    ``backends``: ``torch.backends`` (a stand-in in tests)."""
    if backends is None:
        import torch

        backends = torch.backends
    on = tf32 == "on"
    api = tf32_api(backends)
    if api == LEGACY:
        backends.cuda.matmul.allow_tf32 = on
        backends.cudnn.allow_tf32 = on  # convolutions and RNNs alike
    else:
        precision = "tf32" if on else "ieee"
        backends.cuda.matmul.fp32_precision = precision
        backends.cudnn.conv.fp32_precision = precision
        backends.cudnn.rnn.fp32_precision = precision
    return api
