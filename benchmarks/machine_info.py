"""What a benchmark says of the machine it ran on. Figures from different machines are compared
as ratios, never as absolutes, so every benchmark names its CPU, cores and memory the same way.

Benchmarks import it as ``benchmarks.machine_info`` (they run as ``python -m benchmarks.NAME``)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def _proc_field(path: str, key: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU's model name, e.g. ``AMD EPYC 7B13``."""
    return _proc_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine() or "unknown"


def memory_gib() -> float | None:
    total = _proc_field("/proc/meminfo", "MemTotal")
    return round(int(total.split()[0]) / 2**20, 1) if total else None


def describe() -> str:
    """One line: ``<cpu>, <n> cores, Python <version>``."""
    return f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"
