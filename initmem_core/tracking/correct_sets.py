"""Which test examples a run got right at its selected checkpoint, as a small text artifact.

One bit per test example (``numpy.packbits``), zlib-compressed, base64 in JSON: 10,000 test
images take about 1.5 kB. From these the report adds the test set's own sampling error to its
intervals (report/inference.py: intervals for the population, not only for this test set).
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

ARTIFACT = "test_correct.json"
FORMAT = "packbits+zlib+base64"


def packed(correct: Any) -> dict[str, Any]:
    """``correct`` (a sequence of booleans, one per test example) as a small JSON-ready mapping:
    what both the run's artifact and a sweep's export (tracking/export.py) hold."""
    import numpy as np

    bits = np.asarray(correct, dtype=bool)
    data = zlib.compress(np.packbits(bits).tobytes(), 9)
    return {"format": FORMAT, "n": int(bits.size), "data": base64.b64encode(data).decode("ascii")}


def unpacked(data: dict[str, Any]):
    """The boolean numpy array ``packed`` wrote."""
    import numpy as np

    if data.get("format") != FORMAT:
        raise ValueError(f"per-example records in format {data.get('format')!r}, not {FORMAT!r}")
    bits = np.frombuffer(zlib.decompress(base64.b64decode(data["data"])), dtype=np.uint8)
    return np.unpackbits(bits, count=int(data["n"])).astype(bool)


def encode(correct: Any, epoch: int) -> str:
    """``correct``: a sequence of booleans (a bool tensor or array), one per test example."""
    found = packed(correct)
    return json.dumps({"format": found["format"], "n": found["n"], "epoch": int(epoch), "data": found["data"]})


def decode(text: str):
    """The boolean numpy array ``encode`` wrote."""
    return unpacked(json.loads(text))
