"""The steps of ``benchmarks/gpu_check.py``, one module each, and what they share.

``common``: the plan of sizes and deadlines, the step context, worker processes, the synthetic
CIFAR files and the comparisons; ``report``: the goals and the docs section. Each step module
holds a ``run(ctx) -> dict`` and the worker processes it starts; ``STEPS`` lists them in order.
The fused model of K CIFAR ResNets that ``lockstep`` measures is
``initmem_plugins.architectures.fused_cifar_resnet`` (tests/plugins/architectures/test_fused_cifar_resnet.py checks it).
"""

from __future__ import annotations

#: (name, letter, module under gpu_steps): the order they are reported in.
STEPS = (
    ("tests", "a", "pytest_step"),
    ("determinism", "b", "cells"),
    ("divergence", "c", "cells"),
    ("resume", "d", "cells"),
    ("speed", "e", "speed"),
    ("concurrency", "f", "concurrency"),
    ("lockstep", "g", "lockstep"),
)
NAMES = tuple(name for name, _, _ in STEPS)
LETTER = {name: letter for name, letter, _ in STEPS}
MODULE = {name: module for name, _, module in STEPS}
#: Correctness checks: they run side by side first; the timed steps then run one at a time.
CHECKS = ("tests", "determinism", "divergence", "resume")
