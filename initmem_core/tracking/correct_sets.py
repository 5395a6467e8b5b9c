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


def encode(correct: Any, epoch: int) -> str:
    """``correct``: a sequence of booleans (a bool tensor or array), one per test example."""
    import numpy as np

    bits = np.asarray(correct, dtype=bool)
    packed = zlib.compress(np.packbits(bits).tobytes(), 9)
    return json.dumps(
        {
            "format": "packbits+zlib+base64",
            "n": int(bits.size),
            "epoch": int(epoch),
            "data": base64.b64encode(packed).decode("ascii"),
        }
    )


def decode(text: str):
    """The boolean numpy array ``encode`` wrote."""
    import numpy as np

    data = json.loads(text)
    packed = np.frombuffer(zlib.decompress(base64.b64decode(data["data"])), dtype=np.uint8)
    return np.unpackbits(packed, count=int(data["n"])).astype(bool)
