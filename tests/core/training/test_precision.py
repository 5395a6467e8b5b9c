"""--tf32 on every torch pyproject.toml admits: stand-ins for the ``torch.backends`` of older and
newer builds (only the legacy flags, torch < 2.9; both APIs, 2.9-2.14; only ``fp32_precision``, a
build without the legacy flags), then the real one, then a compiled run with TF32 on the CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from initmem_core.training import precision
from initmem_core.training.precision import LEGACY, PRECISION, tf32_api, use_precision

# -- stand-ins ------------------------------------------------------------------------------------


def legacy_only():
    """torch < 2.9: ``allow_tf32`` flags, no ``fp32_precision``."""
    return SimpleNamespace(
        cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False)), cudnn=SimpleNamespace(allow_tf32=True)
    )


class _Context:
    """What torch 2.9-2.14 keep (``at::Context``): a legacy and a new state per backend. A legacy
    setter writes both; the new setter writes only the new one; a legacy read of states that
    disagree raises RuntimeError, as ``allowTF32CuBLAS``/``allowTF32CuDNN`` do."""

    def __init__(self):
        self.legacy = {"matmul": False, "cudnn": True}
        self.new = {"matmul": "ieee", "conv": "tf32", "rnn": "tf32"}

    def read_legacy(self, backend):
        new = [self.new[op] == "tf32" for op in (("matmul",) if backend == "matmul" else ("conv", "rnn"))]
        if any(value != self.legacy[backend] for value in new):
            raise RuntimeError("you have used mix of the legacy and new APIs to set the TF32 status")
        return self.legacy[backend]

    def write_legacy(self, backend, on):
        self.legacy[backend] = on
        for op in ("matmul",) if backend == "matmul" else ("conv", "rnn"):
            self.new[op] = "tf32" if on else "ieee"


class _Flags:
    """One holder of flags (``cuda.matmul``, ``cudnn``, ``cudnn.conv``) over a ``_Context``."""

    def __init__(self, context, legacy=None, new=None, **children):
        object.__setattr__(self, "_c", (context, legacy, new, children))

    def __getattr__(self, name):
        context, legacy, new, children = object.__getattribute__(self, "_c")
        if name in children:
            return children[name]
        if name == "allow_tf32" and legacy:
            return context.read_legacy(legacy)
        if name == "fp32_precision" and new:
            return context.new[new]
        raise AttributeError(name)

    def __setattr__(self, name, value):
        context, legacy, new, _ = object.__getattribute__(self, "_c")
        if name == "allow_tf32" and legacy:
            context.write_legacy(legacy, value)
        elif name == "fp32_precision" and new:
            context.new[new] = value
        else:
            raise AttributeError(name)


def both_apis():
    """torch 2.9-2.14: both APIs over one state."""
    context = _Context()
    cudnn = _Flags(context, legacy="cudnn", conv=_Flags(context, new="conv"), rnn=_Flags(context, new="rnn"))
    return SimpleNamespace(cuda=SimpleNamespace(matmul=_Flags(context, legacy="matmul", new="matmul")), cudnn=cudnn)


def precision_only():
    """A build without the legacy flags: only ``fp32_precision``."""
    context = _Context()
    cudnn = _Flags(context, conv=_Flags(context, new="conv"), rnn=_Flags(context, new="rnn"))
    return SimpleNamespace(cuda=SimpleNamespace(matmul=_Flags(context, new="matmul")), cudnn=cudnn)


def test_an_older_torch_with_only_the_legacy_flags_gets_them():
    backends = legacy_only()
    assert use_precision("on", backends) == LEGACY
    assert backends.cuda.matmul.allow_tf32 is True and backends.cudnn.allow_tf32 is True
    use_precision("off", backends)  # cuDNN's own default is TF32: off turns it off
    assert backends.cuda.matmul.allow_tf32 is False and backends.cudnn.allow_tf32 is False
    assert not hasattr(backends.cuda.matmul, "fp32_precision")  # nothing of the new API was made up


def test_the_stand_in_for_torch_2_9_refuses_a_legacy_read_after_the_new_api_set_it():
    """The failure --tf32 once met (pytorch issue 166387), reproduced: what the old setter did."""
    backends = both_apis()
    backends.cuda.matmul.fp32_precision = "tf32"
    with pytest.raises(RuntimeError, match="mix of the legacy and new"):
        _ = backends.cuda.matmul.allow_tf32  # what Inductor reads on 2.9-2.11


@pytest.mark.parametrize("tf32, legacy, new", [("on", True, "tf32"), ("off", False, "ieee")])
def test_a_torch_with_both_apis_gets_the_legacy_flags_and_every_reader_agrees(tf32, legacy, new):
    backends = both_apis()
    backends.cuda.matmul.fp32_precision = "tf32"  # someone set the new API before: a mixed state
    assert use_precision(tf32, backends) == LEGACY
    assert backends.cuda.matmul.allow_tf32 is legacy and backends.cudnn.allow_tf32 is legacy  # legacy readers
    assert backends.cuda.matmul.fp32_precision == new  # and the new ones
    assert backends.cudnn.conv.fp32_precision == new and backends.cudnn.rnn.fp32_precision == new


def test_a_torch_without_the_legacy_flags_gets_fp32_precision():
    backends = precision_only()
    assert tf32_api(backends) == PRECISION
    use_precision("on", backends)
    assert [backends.cuda.matmul.fp32_precision, backends.cudnn.conv.fp32_precision] == ["tf32", "tf32"]
    use_precision("off", backends)
    assert {
        backends.cuda.matmul.fp32_precision,
        backends.cudnn.conv.fp32_precision,
        backends.cudnn.rnn.fp32_precision,
    } == {"ieee"}


def test_a_torch_with_neither_api_is_one_clear_error():
    with pytest.raises(precision.ConfigError, match="torch>=2.4"):
        use_precision("on", SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace()), cudnn=SimpleNamespace()))


# -- the installed torch --------------------------------------------------------------------------


def test_the_installed_torch_reads_one_state_through_both_apis(kept_settings):
    if tf32_api(torch.backends) == LEGACY and hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "tf32"  # the mixed state the old setter left
    use_precision("on")
    assert torch.backends.cuda.matmul.allow_tf32 is True and torch.backends.cudnn.allow_tf32 is True
    use_precision("off")
    assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is False
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch >= 2.9: the new readers agree
        assert torch.backends.cuda.matmul.fp32_precision != "tf32"
        assert torch.backends.cudnn.conv.fp32_precision != "tf32"
