"""Does the report recover a known forgetting time? Synthetic sweeps whose radial memory decays
exponentially in T_L2 with a known half-life, fed as ``CellRecord``s through ``build_report``
exactly as a real sweep is. Prints how often the radial half-life (in T_L2) is within 10% of the
truth and how often its 95% interval covers it, and can write them into docs/STATISTICS.md.

    python -m benchmarks.forgetting_times                # 200 sweeps, about a minute
    python -m benchmarks.forgetting_times --write-docs   # replace the section in docs/STATISTICS.md

The model: a group (SGD with L2 at lambda, constant lr, ``STEPS`` steps per epoch) has
T_L2(t) = lambda * lr * STEPS * t after epoch t. Seed k forgets with its own half-life
h_k = h * exp(SEED_SD * z_k) (seeds differ; h is their geometric mean, the figure the report
estimates), so its radial memory is m_k(t) = 2^(-T_L2(t) / h_k), and each run's log ||W_t|| is
m_k(t) * log sigma + a common drift + per-run, per-epoch noise of sd ``NORM_NOISE``. Cosines and
accuracies follow similar shapes so that every memory of the report has something to read.
Everything is seeded: the same command prints the same figures.
"""

from __future__ import annotations

import argparse
import math
import re
import time
from pathlib import Path

import numpy as np

from initmem_core.tracking.records import CellRecord

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
                "weight_norm": list(enumerate(np.exp(log_norm).tolist())),
                "init_cosine": list(enumerate(cosine.tolist())),
                "test_acc": list(enumerate(accuracy.tolist())),
                "clock_sgd": list(enumerate(clock_sgd.tolist())),
                "clock_l2": list(enumerate(clock_l2.tolist())),
                "clock_adapt": list(enumerate(clock_adapt.tolist())),
            }
            records.append(
                CellRecord(
                    config={"opt": "sgd", "lr": lr, "l2": l2, "epochs": epochs, "sigma": sigma, "seed": seed},
                    metrics={
                        "best_val_test_acc": float(accuracy[-1]),
                        "fit": 1.0,  # every simulated run fits: the question here is when it forgets
                        "weight_norm": float(np.exp(log_norm[-1])),
                        "weight_norm_ratio": float(np.exp(log_norm[-1])) / sigma,
                        "init_cosine": float(cosine[-1]),
                        "clock_sgd": float(clock_sgd[-1]),
                        "clock_l2": float(clock_l2[-1]),
                        "clock_adapt": float(clock_adapt[-1]),
                    },
                    histories=histories,
                    weight_norms=histories["weight_norm"],
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
            estimate, low, high = found.half_lives["radial"].value("clock_l2")
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
        record.histories.pop("test_acc", None)
    return records


def measure_finding(sweeps: int) -> dict[str, float]:
    """How often "forgetting follows the clocks" is reproduced / contradicted when the groups
    forget on T_L2 (it holds) and when they forget on epochs whatever their clocks (it fails)."""
    from initmem_core.report.verdicts import CONTRADICTED, REPRODUCED
    from initmem_plugins.claims.paper import forgetting_follows_the_clocks, read_sweep

    counts = {"clock_reproduced": 0, "clock_contradicted": 0, "epoch_reproduced": 0, "epoch_contradicted": 0}
    for sweep in range(sweeps):
        for world, options in (("clock", {}), ("epoch", {"in_epochs": 12.0})):
            verdict = forgetting_follows_the_clocks(
                read_sweep(without_accuracy(synthetic_sweep(sweep, **options)))
            ).verdict
            counts[f"{world}_reproduced"] += verdict == REPRODUCED
            counts[f"{world}_contradicted"] += verdict == CONTRADICTED
    return {key: value / sweeps for key, value in counts.items()}


SECTION = "## Forgetting times"


def section(result: dict[str, float], finding: dict[str, float]) -> str:
    return f"""{SECTION}

`benchmarks/forgetting_times.py` checks the half-life of the forgetting view (report/forgetting.py)
on synthetic sweeps with a known answer: {len(GROUPS)} groups of SGD with L2 ((lambda, lr) =
{", ".join(f"({l2:g}, {lr:g})" for l2, lr in GROUPS)}), {len(SIGMAS)} sigmas, {SEEDS} seeds, {EPOCHS} epochs of
{STEPS} steps, whose radial memory decays as 2^(-T_L2 / h_k): each seed's half-life h_k is the
truth h = {HALF_LIFE:g} (in T_L2) times exp({SEED_SD:g} z), and each run's log ||W|| carries noise of sd
{NORM_NOISE:g} per epoch. Over {result["sweeps"]} simulated sweeps ({result["half_lives"]} group half-lives):

| radial half-life in T_L2 | measured |
|---|---|
| within 10% of the truth | {100 * result["within_10pct"]:.1f}% |
| 95% interval covers the truth | {100 * result["coverage"]:.1f}% |
| median relative error | {100 * result["median_error"]:+.2f}% |
| largest relative error | {100 * result["worst_error"]:.1f}% |

The estimate is the geometric mean of the seeds' half-lives, its interval a t interval over seeds
in log units; each seed's crossing is interpolated linearly between the two epochs that bracket it
(a straight line between two points of a convex decay crosses a little late, noise a little early:
both are far below the seeds' spread here). Such a test of the half-life needs the horizon to pass
it: a memory that never falls to half is reported as *not within the horizon*, with the clocks
reached, never extrapolated.

The finding *forgetting follows the clocks* (report/findings.py) on the same sweeps: its three
groups share the mechanism (SGD with L2: T_L2) and differ in lambda and lr. When they forget on T_L2
as above it is reproduced in {100 * finding["clock_reproduced"]:.1f}% of sweeps and contradicted in
{100 * finding["clock_contradicted"]:.1f}%; when each forgets with a half-life of 12 epochs whatever its clock,
it is reproduced in {100 * finding["epoch_reproduced"]:.1f}% and contradicted in {100 * finding["epoch_contradicted"]:.1f}%.

Regenerate: `python -m benchmarks.forgetting_times --write-docs` (about a minute and a half).
"""


def write_docs(text: str, path: Path) -> None:
    """Replace (or append) this section of docs/STATISTICS.md, leaving the rest as it is."""
    page = path.read_text(encoding="utf-8") if path.exists() else "# Statistics\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    page = pattern.sub(lambda _: text + "\n", page) if pattern.search(page) else page.rstrip("\n") + "\n\n" + text
    path.write_text(page.rstrip("\n") + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=200)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    result, finding = measure(args.sweeps), measure_finding(args.sweeps)
    text = section(result, finding)
    print(text)
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.write_docs:
        write_docs(text, Path(__file__).resolve().parents[1] / "docs" / "STATISTICS.md")


if __name__ == "__main__":
    main()
