"""The paper's forgetting on synthetic sweeps with a known answer: groups whose radial memory decays
exponentially in T_L2 with a known half-life, as ``CellRecord``s a report reads as a real sweep's.
``measure`` checks the report's half-life against the truth, ``measure_finding`` the claim *forgetting
follows the clocks*; ``benchmarks/forgetting_times.py`` writes both into docs/STATISTICS.md.

The model: a group (SGD with L2 at lambda, constant lr, ``STEPS`` steps per epoch) has
T_L2(t) = lambda * lr * STEPS * t after epoch t. Seed k forgets with its own half-life
h_k = h * exp(SEED_SD * z_k) (seeds differ; h is their geometric mean, the figure the report
estimates), so its radial memory is m_k(t) = 2^(-T_L2(t) / h_k), and each run's log ||W_t|| is
m_k(t) * log sigma + a common drift + per-run, per-epoch noise of sd ``NORM_NOISE``. Cosines and
accuracies follow similar shapes so that every memory of the report has something to read.
Everything is seeded: the same call gives the same figures.
"""

from __future__ import annotations

import math

import numpy as np

from initmem_core.config import from_mapping
from initmem_core.tracking.records import CellRecord
from initmem_core.vocabulary import (
    BEST_VAL_TEST_ACC,
    CLOCK_ADAPT,
    CLOCK_L2,
    CLOCK_SGD,
    FIT,
    INIT_COSINE,
    TEST_ACC,
    WEIGHT_NORM,
    WEIGHT_NORM_RATIO,
)

SIGMAS = (0.25, 0.5, 1.0, 2.0, 4.0)
SEEDS = 4
STEPS = 25  # optimizer steps per epoch
HALF_LIFE = 0.2  # in T_L2
SEED_SD = 0.1  # seed-to-seed sd of log half-life
NORM_NOISE = 0.02  # sd of log ||W|| per run and epoch
#: (lambda, lr) of the groups: every one forgets with the same half-life in T_L2, so in epochs
#: their half-lives differ as 1 / (lambda * lr)
GROUPS = ((0.01, 0.05), (0.02, 0.05), (0.01, 0.1))
EPOCHS = 60


def group_records(
    l2: float,
    lr: float,
    rng: np.random.Generator,
    half_life: float = HALF_LIFE,
    epochs: int = EPOCHS,
    seeds: int = SEEDS,
    in_epochs: float | None = None,
) -> list[CellRecord]:
    """One group's cells. ``in_epochs``: forget with that half-life in epochs instead (the world
    where the clocks do not matter)."""
    steps = np.arange(epochs + 1) * STEPS
    clock_l2 = l2 * lr * steps
    clock_sgd = lr * lr * steps / 64
    clock_adapt = lr * steps
    records = []
    for seed in range(seeds):
        own = math.exp(SEED_SD * rng.standard_normal())
        time_axis = np.arange(epochs + 1) / in_epochs if in_epochs else clock_l2 / half_life
        memory = 2.0 ** (-time_axis / own)
        drift = -0.3 * (1 - memory)  # every norm also moves, as a real run's do
        for sigma in SIGMAS:
            log_norm = memory * math.log(sigma) + 2.0 + drift + NORM_NOISE * rng.standard_normal(epochs + 1)
            log_norm[0] = math.log(sigma) + 2.0  # the initialization is exact
            cosine = np.clip(memory + 0.02 * rng.standard_normal(epochs + 1), -1, 1)
            cosine[0] = 1.0
            accuracy = 0.9 - 0.1 * memory * abs(math.log(sigma)) / math.log(4) + 0.01 * rng.standard_normal(epochs + 1)
            accuracy[0] = 0.1
            histories = {
                WEIGHT_NORM: list(enumerate(np.exp(log_norm).tolist())),
                INIT_COSINE: list(enumerate(cosine.tolist())),
                TEST_ACC: list(enumerate(accuracy.tolist())),
                CLOCK_SGD: list(enumerate(clock_sgd.tolist())),
                CLOCK_L2: list(enumerate(clock_l2.tolist())),
                CLOCK_ADAPT: list(enumerate(clock_adapt.tolist())),
            }
            records.append(
                CellRecord(
                    config=from_mapping(
                        {"opt": "sgd", "lr": lr, "l2": l2, "epochs": epochs, "sigma": sigma, "seed": seed}
                    ),
                    metrics={
                        BEST_VAL_TEST_ACC: float(accuracy[-1]),
                        FIT: 1.0,  # every simulated run fits: the question here is when it forgets
                        WEIGHT_NORM: float(np.exp(log_norm[-1])),
                        WEIGHT_NORM_RATIO: float(np.exp(log_norm[-1])) / sigma,
                        INIT_COSINE: float(cosine[-1]),
                        CLOCK_SGD: float(clock_sgd[-1]),
                        CLOCK_L2: float(clock_l2[-1]),
                        CLOCK_ADAPT: float(clock_adapt[-1]),
                    },
                    histories=histories,
                    weight_norms=histories[WEIGHT_NORM],
                    num_classes=10,
                )
            )
    return records


def synthetic_sweep(seed: int, groups=GROUPS, **options) -> list[CellRecord]:
    rng = np.random.default_rng(seed)
    return [record for l2, lr in groups for record in group_records(l2, lr, rng, **options)]


def measure(sweeps: int) -> dict[str, float]:
    """Share of (sweep, group) half-lives within 10% of the truth and covered by their interval."""
    from initmem_core.groups import group_keys
    from initmem_core.report.forgetting import build_forgetting

    within = covered = total = 0
    errors = []
    for sweep in range(sweeps):
        records = synthetic_sweep(sweep)
        by_group: dict[str, list[CellRecord]] = {}
        for record, key in zip(records, group_keys(r.config for r in records)):
            by_group.setdefault(key, []).append(record)
        for found in build_forgetting(by_group, accuracy=False).values():
            estimate, low, high = found.half_lives["radial"].value(CLOCK_L2)
            total += 1
            errors.append(estimate / HALF_LIFE - 1)
            within += abs(estimate / HALF_LIFE - 1) <= 0.10
            covered += low <= HALF_LIFE <= high
    return {
        "sweeps": sweeps,
        "half_lives": total,
        "within_10pct": within / total,
        "coverage": covered / total,
        "median_error": float(np.median(errors)),
        "worst_error": float(np.max(np.abs(errors))),
    }


def without_accuracy(records: list[CellRecord]) -> list[CellRecord]:
    """The records without their test_acc history: the finding reads radial memory only, and a
    debiased spread per epoch is the slow part of a report."""
    for record in records:
        record.histories.pop(TEST_ACC, None)
    return records


def measure_finding(sweeps: int) -> dict[str, float]:
    """How often "forgetting follows the clocks" is reproduced / contradicted when the groups
    forget on T_L2 (it holds) and when they forget on epochs whatever their clocks (it fails)."""
    from initmem_core.report.claim_groups import read_sweep
    from initmem_core.report.claims import claim_named, evaluate_claim
    from initmem_core.report.verdicts import CONTRADICTED, REPRODUCED

    claim = claim_named("forgetting_follows_the_clocks")
    counts = {"clock_reproduced": 0, "clock_contradicted": 0, "epoch_reproduced": 0, "epoch_contradicted": 0}
    for sweep in range(sweeps):
        for world, options in (("clock", {}), ("epoch", {"in_epochs": 12.0})):
            verdict = evaluate_claim(claim, read_sweep(without_accuracy(synthetic_sweep(sweep, **options)))).verdict
            counts[f"{world}_reproduced"] += verdict == REPRODUCED
            counts[f"{world}_contradicted"] += verdict == CONTRADICTED
    return {key: value / sweeps for key, value in counts.items()}
