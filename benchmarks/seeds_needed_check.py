"""Does ``seeds_needed`` keep its promise? Plan from a pilot sweep, run the planned seeds, and count
how often the new sweep resolves the difference: the promise is 80% if the true difference were the
observed one (report/inference.py, ``SpreadDifference.seeds_needed``).

    python -m benchmarks.seeds_needed_check                 # 400 pilots per setting
    python -m benchmarks.seeds_needed_check --write-docs    # replace the table in docs/STATISTICS.md

Each setting: two groups, their true population spreads 4 pp and 2 pp (or 4 pp and 3 pp) over
sigma 0.1/0.5/1.4/2.5, a pilot sweep of 4 seeds. A pilot whose difference is not resolved and that
gets a seed count is followed by a new sweep of that many seeds, scored on the *same* test set
(a new sweep of a real preset reuses its test split) with fresh seeds; it resolves the difference
when its 95% interval excludes zero. The noise is calibration.py's: per-example flips of equally
hard examples, or its mixed shared test set (examples of varying difficulty, seed-shared parts).
Everything is seeded.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from initmem_core.report.inference import PLANNED_POWER, AccuracyTable, spread_difference

ROOT = Path(__file__).resolve().parents[1]
SIGMAS = (0.1, 0.5, 1.4, 2.5)
FOUR_PP, TWO_PP, THREE_PP = (97, 96, 95, 93), (97, 96.5, 96, 95), (97, 96, 95.5, 94)
PILOT_SEEDS = 4
BEGIN, END = "<!-- seeds_needed check: begin -->", "<!-- seeds_needed check: end -->"


def calibration():
    """benchmarks/calibration.py (its noise models)."""
    from benchmarks import calibration as module

    return module


class TestSet:
    """One drawn test set: what each (group, sigma) finds hard on it, in log-odds (``None``: every
    example equally hard, calibration.py's per-example noise)."""

    def __init__(self, rng, truths: dict[str, tuple[float, ...]], model, n_test: int = 360):
        from scipy import special

        self.model, self.truths, self.n = model, truths, n_test
        self.logits = {}
        if model is None:
            return
        level = calibration().population_level
        difficulty = rng.normal(0, model.difficulty, n_test)
        self.logits = {
            (group, sigma): level(acc, model.total_sd) + difficulty + rng.normal(0, model.specific, n_test)
            for group, truth in truths.items()
            for sigma, acc in zip(SIGMAS, truth)
        }
        self.expit = special.expit

    def sweep(self, rng, seeds: int) -> dict[str, AccuracyTable]:
        """Fresh seeds scored on this test set: each group's accuracy table with its per-example records."""
        tables = {}
        m = self.model
        if m is not None:
            seed_example = rng.normal(0, m.seed_example, (seeds, self.n))
            seed_shift = rng.normal(0, m.seed, seeds)
        for group, truth in self.truths.items():
            accuracy, correct = {}, {}
            for sigma, acc in zip(SIGMAS, truth):
                if m is None:
                    p = np.full((seeds, self.n), acc / 100)
                else:
                    p = self.expit(
                        self.logits[group, sigma] + seed_example + (seed_shift + rng.normal(0, m.run, seeds))[:, None]
                    )
                right = rng.random((seeds, self.n)) < p
                accuracy[sigma] = {k: 100 * float(right[k].mean()) for k in range(seeds)}
                correct[sigma] = {k: right[k] for k in range(seeds)}
            tables[group] = AccuracyTable(accuracy, correct, "one test set")
        return tables


def check(rng, pilots: int, truths: dict[str, tuple[float, ...]], model) -> dict[str, float]:
    planned, resolved, opposite, seeds, observed, no_count, pilot_resolved = 0, 0, 0, [], [], 0, 0
    for _ in range(pilots):
        test_set = TestSet(rng, truths, model)
        pilot = test_set.sweep(rng, PILOT_SEEDS)
        difference = spread_difference(pilot["a"], pilot["b"])
        needed, _ = difference.seeds_needed()
        if difference.lo > 0 or difference.hi < 0:
            pilot_resolved += 1
            continue
        if needed is None:
            no_count += 1
            continue
        planned += 1
        seeds.append(needed)
        observed.append(abs(difference.estimate))
        follow = test_set.sweep(rng, needed)
        again = spread_difference(follow["a"], follow["b"])
        up = difference.estimate > 0  # the plan promises resolution on the pilot's side
        resolved += again.lo > 0 if up else again.hi < 0
        opposite += again.hi < 0 if up else again.lo > 0
    return {
        "pilots": pilots,
        "pilot_resolved": pilot_resolved / pilots,
        "no_count": no_count / pilots,
        "planned": planned,
        "power": resolved / max(planned, 1),
        "opposite": opposite / max(planned, 1),
        "median_seeds": float(np.median(seeds)) if seeds else float("nan"),
        "observed": float(np.mean(observed)) if observed else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pilots", type=int, default=400, help="pilot sweeps per setting")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write-docs", action="store_true", help="replace the table in docs/STATISTICS.md")
    args = parser.parse_args()
    mixed = calibration().SHARED_TEST_SETS[1]
    settings = [
        ("4 pp vs 2 pp", {"a": FOUR_PP, "b": TWO_PP}, None, "per-example"),
        ("4 pp vs 3 pp", {"a": FOUR_PP, "b": THREE_PP}, None, "per-example"),
        ("4 pp vs 2 pp", {"a": FOUR_PP, "b": TWO_PP}, mixed, mixed.name),
    ]
    start = time.perf_counter()
    lines = [
        f"Measured by `python -m benchmarks.seeds_needed_check --pilots {args.pilots}` ({args.pilots} pilot sweeps "
        f"of {PILOT_SEEDS} seeds per setting); promised power {PLANNED_POWER:.0%}.",
        "",
        "| truths (population spreads) | noise | pilot resolved | no count within 200 | planned | "
        "median planned seeds | mean |observed difference| when planned | realised power [95% interval] | "
        "resolved the other way |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    from scipy import stats

    for index, (label, truths, model, noise) in enumerate(settings):
        found = check(np.random.default_rng([args.seed, index]), args.pilots, truths, model)
        k, n = round(found["power"] * found["planned"]), found["planned"]
        low, high = (
            stats.beta.ppf(0.025, k, n - k + 1) if k else 0.0,
            stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0,
        )  # Clopper-Pearson
        lines.append(
            f"| {label} | {noise} | {found['pilot_resolved']:.1%} | {found['no_count']:.1%} | {n} | "
            f"{found['median_seeds']:.0f} | {found['observed']:.2f} pp | {found['power']:.1%} "
            f"[{low:.1%}, {high:.1%}] | {found['opposite']:.1%} |"
        )
        print(lines[-1], flush=True)
    lines[0] = lines[0].replace(")", f", {(time.perf_counter() - start) / 60:.1f} min)", 1)
    table = "\n".join(lines)
    print(table)
    if args.write_docs:
        path = ROOT / "docs" / "STATISTICS.md"
        text = path.read_text()
        start_at, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
        path.write_text(text[:start_at] + "\n" + table + "\n" + text[stop:])


if __name__ == "__main__":
    main()
