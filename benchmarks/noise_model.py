"""The calibration's noise, fitted to the committed exports (docs/STATISTICS.md, "The noise model,
fitted to the exports").

A run's chance of getting test example i right is, on the log-odds scale,

    level(cell) + d_i + e_{cell,i} + u_run

with d_i the example's difficulty shared by every cell scored on that test set (sd ``difficulty``),
e the part specific to the cell (group and sigma: what that model finds hard; sd ``specific``), and
u a shift of the whole run shared by all its examples (sd ``run``: a data order, a lucky draw of Z).
Every draw is normal. That is ``calibration.SharedTestSet``'s model; this module fits its three sds,
per dataset, from the runs of docs/results/*.json.gz that **fit** their training set (the only runs
a claim decides on, report/regime.py):

- the cell's total per-example sd sqrt(difficulty² + specific²) by maximum likelihood of each
  example's count of right answers over a cell's runs (a logit-normal binomial, one level per cell,
  one sd per dataset);
- the shared share difficulty² / total² by the composite likelihood of pairs of cells of one export
  (scored on one test set): the counts of the two cells given a shared draw of d_i;
- the run-level sd by moments: the cell's seed-to-seed variance of accuracy less what per-example flips
  alone give (the unbiased per-example estimate Σ m_i(1 − m_i) k/(k − 1) / n²), divided by the squared
  slope of accuracy in a shift of the log-odds at that cell's level, pooled over cells by their
  degrees of freedom; its standard error from resampling the cells.

The same run sometimes appears in two exports (a preset reusing another's cells): it is counted once.

    python -m benchmarks.noise_model              # the fitted figures and the check, as markdown
    python -m benchmarks.calibration --fit-noise  # the same, written into docs/STATISTICS.md
"""

from __future__ import annotations

import argparse
import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXPORTS = ROOT / "docs" / "results"
#: Gauss–Hermite (probabilists') nodes for the normal integrals.
NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(40)
WEIGHTS = WEIGHTS / WEIGHTS.sum()


@dataclass
class Cell:
    """The runs of one group at one sigma that fit: ``correct`` (runs × examples)."""

    export: str
    group: str
    sigma: float
    correct: np.ndarray
    all_accuracies: list[float] = field(default_factory=list)  # pp, every trained run (fit or not)

    @property
    def runs(self) -> int:
        return self.correct.shape[0]

    @property
    def accuracies(self) -> np.ndarray:
        return 100 * self.correct.mean(axis=1)

    @property
    def flips_variance(self) -> float:
        """pp²: the seed-to-seed variance per-example flips alone give, estimated without bias."""
        k, n = self.correct.shape
        m = self.correct.mean(axis=0)
        return float(1e4 * (m * (1 - m)).sum() * k / (k - 1) / n**2)


def read_cells(paths: Iterable[Path]) -> dict[str, list[Cell]]:
    """Per dataset, the (export, group, sigma) cells of fit runs with per-example records, each
    run once (a run found in an earlier export is skipped)."""
    from initmem_core.tracking.export import read_export

    seen: set[str] = set()
    cells: dict[str, list[Cell]] = {}
    for path in sorted(paths):
        export = read_export(path)
        by_cell: dict[tuple[str, float], list] = {}
        for record in export.records:
            if not record.trained or record.test_correct is None:
                continue
            config = record.config
            group = repr((config.arch, config.opt, config.lr, config.momentum, config.weight_decay))
            group += repr((config.batch_size, config.epochs, config.until, config.l2, config.lr_match_sigma))
            by_cell.setdefault((group, config.sigma), []).append(record)
        for (group, sigma), records in by_cell.items():
            fresh = []
            for record in records:
                key = hashlib.sha1(
                    record.test_correct.tobytes() + repr(record.metrics["best_val_test_acc"]).encode()
                ).hexdigest()
                if key not in seen:
                    seen.add(key)
                    fresh.append(record)
            fit = [r for r in fresh if r.fit]
            if not fresh:
                continue
            n = len(fresh[0].test_correct)
            correct = np.array([r.test_correct for r in fit], dtype=bool).reshape(len(fit), n)
            cells.setdefault(fresh[0].config.data, []).append(
                Cell(path.name.removesuffix(".json.gz"), group, sigma, correct,
                     [100 * r.metrics["best_val_test_acc"] for r in fresh])
            )  # fmt: skip
    return cells


def _expit(x):
    return 1 / (1 + np.exp(-x))


def _binom_logpmf(y: np.ndarray, k: int, p: np.ndarray) -> np.ndarray:
    from scipy import stats

    return stats.binom.logpmf(y, k, p)


def _counts(cell: Cell) -> np.ndarray:
    """How many examples were right in exactly y of the cell's runs, y = 0..k."""
    return np.bincount(cell.correct.sum(axis=0), minlength=cell.runs + 1)


def _cell_loglik(level: float, sd: float, cell: Cell) -> float:
    k = cell.runs
    y = np.arange(k + 1)
    p = _expit(level + sd * NODES)  # nodes
    like = np.exp(_binom_logpmf(y[:, None], k, p[None, :])) @ WEIGHTS  # P(count = y)
    return float((_counts(cell) * np.log(np.maximum(like, 1e-300))).sum())


def _level(sd: float, cell: Cell) -> float:
    from scipy import optimize

    return float(optimize.minimize_scalar(lambda a: -_cell_loglik(a, sd, cell), bounds=(-15, 15), method="bounded").x)


def fit_total_sd(cells: list[Cell]) -> tuple[float, dict[int, float]]:
    """The per-example log-odds sd of a cell (one per dataset) and each cell's level, by maximum
    likelihood over the cells with two or more fit runs (profile over the levels)."""
    from scipy import optimize

    used = [c for c in cells if c.runs >= 2]

    def minus(sd: float) -> float:
        return -sum(_cell_loglik(_level(sd, c), sd, c) for c in used)

    sd = float(optimize.minimize_scalar(minus, bounds=(0.05, 8), method="bounded", options={"xatol": 1e-3}).x)
    return sd, {id(c): _level(sd, c) for c in used}


def _pair_loglik(share: float, total: float, a: Cell, la: float, b: Cell, lb: float) -> float:
    """The log-likelihood of the joint counts of two cells scored on one test set, given the shared
    share of the per-example variance."""
    shared, specific = total * math.sqrt(share), total * math.sqrt(1 - share)

    def conditional(cell: Cell, level: float) -> np.ndarray:
        # P(count_i | d = shared * node_j): examples × nodes
        k = cell.runs
        p = _expit(level + shared * NODES[:, None] + specific * NODES[None, :])  # d-node × e-node
        y = cell.correct.sum(axis=0)
        table = np.exp(_binom_logpmf(np.arange(k + 1)[:, None, None], k, p[None]))  # (k+1) × d × e
        marginal = table @ WEIGHTS  # (k+1) × d
        return marginal[y]  # examples × d

    joint = (conditional(a, la) * conditional(b, lb)) @ WEIGHTS
    return float(np.log(np.maximum(joint, 1e-300)).sum())


def fit_shared_share(cells: list[Cell], total: float, levels: dict[int, float], pairs_cap: int = 400) -> float:
    """The share of the per-example variance shared by every cell of a test set (composite
    likelihood over pairs of cells of one export; at most ``pairs_cap`` pairs, spread evenly)."""
    from scipy import optimize

    used = [c for c in cells if id(c) in levels]
    pairs = [
        (a, b)
        for i, a in enumerate(used)
        for b in used[i + 1 :]
        if a.export == b.export and a.correct.shape[1] == b.correct.shape[1]
    ]
    if not pairs:
        return math.nan
    pairs = pairs[:: max(1, len(pairs) // pairs_cap)]

    def minus(share: float) -> float:
        return -sum(_pair_loglik(share, total, a, levels[id(a)], b, levels[id(b)]) for a, b in pairs)

    return float(optimize.minimize_scalar(minus, bounds=(0.0, 0.999), method="bounded", options={"xatol": 1e-3}).x)


def slope(level: float, total: float) -> float:
    """pp of accuracy per unit shift of the log-odds, at a cell's level: 100 × E[p(1 − p)]."""
    p = _expit(level + total * NODES)
    return float(100 * (WEIGHTS * p * (1 - p)).sum())


def run_level_variances(cells: list[Cell], total: float, levels: dict[int, float]) -> list[tuple[int, float]]:
    """Per cell of two or more fit runs: (its degrees of freedom, its run-level variance on the
    log-odds scale by moments: excess seed-to-seed variance over the flips', over the slope²)."""
    out = []
    for cell in cells:
        if id(cell) not in levels:
            continue
        excess = float(np.var(cell.accuracies, ddof=1)) - cell.flips_variance
        out.append((cell.runs - 1, excess / slope(levels[id(cell)], total) ** 2))
    return out


def pooled(values: list[tuple[int, float]]) -> float:
    df = sum(d for d, _ in values)
    return sum(d * v for d, v in values) / df if df else math.nan


@dataclass
class Fitted:
    """One dataset's fitted noise: log-odds sds and what they rest on."""

    dataset: str
    n_test: int
    difficulty: float
    specific: float
    run: float
    run_se: float  # of ``run``, from resampling the cells
    total: float
    share: float
    cells: int
    runs: int
    exports: list[str]

    def model(self, n_test: int | None = None, name: str | None = None):
        from benchmarks.calibration import SharedTestSet

        n = n_test or self.n_test
        return SharedTestSet(
            name or f"fitted {self.dataset}, {n:,} examples",
            difficulty=round(self.difficulty, 2),
            specific=round(self.specific, 2),
            run=round(self.run, 2),
            n_test=n,
        )


def fit_dataset(dataset: str, cells: list[Cell], rng=None) -> Fitted:
    rng = np.random.default_rng(0) if rng is None else rng
    total, levels = fit_total_sd(cells)
    share = fit_shared_share(cells, total, levels)
    variances = run_level_variances(cells, total, levels)
    run_var = max(pooled(variances), 0.0)
    draws = [
        max(pooled([variances[i] for i in rng.integers(len(variances), size=len(variances))]), 0) for _ in range(2000)
    ]
    used = [c for c in cells if id(c) in levels]
    share = 0.0 if math.isnan(share) else share
    return Fitted(
        dataset,
        used[0].correct.shape[1],
        total * math.sqrt(share),
        total * math.sqrt(1 - share),
        math.sqrt(run_var),
        float(np.std(np.sqrt(draws))),
        total,
        share,
        len(used),
        sum(c.runs for c in used),
        sorted({c.export for c in used}),
    )


def fit_exports(paths: Iterable[Path] | None = None) -> tuple[list[Fitted], dict[str, list[Cell]]]:
    cells = read_cells(EXPORTS.glob("*.json.gz") if paths is None else paths)
    return [fit_dataset(dataset, found) for dataset, found in sorted(cells.items())], cells


def simulated_sd(rng, fitted: Fitted, cells: list[Cell], draws: int = 200) -> dict[float, tuple[float, float, float]]:
    """Per sigma, the seed-to-seed sd pooled over the real cells (among fit runs), and the same from
    ``draws`` simulated copies of those cells (same runs, same test-set size, each cell at its own
    accuracy): (real, simulated mean, simulated 2.5-97.5% range) in pp."""
    from scipy import special

    from benchmarks.calibration import population_level

    total_all = math.sqrt(fitted.difficulty**2 + fitted.specific**2 + fitted.run**2)
    out = {}
    for sigma in sorted({c.sigma for c in cells}):
        mine = [c for c in cells if c.sigma == sigma and c.runs >= 2]
        if not mine:
            continue
        real = math.sqrt(pooled([(c.runs - 1, float(np.var(c.accuracies, ddof=1))) for c in mine]))
        sims = []
        for _ in range(draws):
            values = []
            for c in mine:
                k, n = c.correct.shape
                level = population_level(float(c.accuracies.mean()), total_all)
                logits = (
                    level
                    + rng.normal(0, fitted.difficulty, n)
                    + rng.normal(0, fitted.specific, n)
                    + rng.normal(0, fitted.run, k)[:, None]
                )
                acc = 100 * (rng.random((k, n)) < special.expit(logits)).mean(axis=1)
                values.append((k - 1, float(np.var(acc, ddof=1))))
            sims.append(math.sqrt(pooled(values)))
        out[sigma] = (real, float(np.mean(sims)), *np.percentile(sims, [2.5, 97.5]))
    return out


def flips_sd(cells: list[Cell], sigma: float) -> float:
    mine = [c for c in cells if c.sigma == sigma and c.runs >= 2]
    return math.sqrt(pooled([(c.runs - 1, c.flips_variance) for c in mine]))


def all_runs_sd(cells: list[Cell], sigma: float) -> tuple[float, int]:
    """The seed-to-seed sd over every trained run (fit or not) at ``sigma``, and how many runs."""
    mine = [c for c in cells if c.sigma == sigma and len(c.all_accuracies) >= 2]
    if not mine:
        return math.nan, 0
    return (
        math.sqrt(pooled([(len(c.all_accuracies) - 1, float(np.var(c.all_accuracies, ddof=1))) for c in mine])),
        sum(len(c.all_accuracies) for c in mine),
    )


def markdown(fitted: list[Fitted], cells: dict[str, list[Cell]], draws: int = 200) -> str:
    rng = np.random.default_rng(0)
    lines = [
        "Fitted by `python -m benchmarks.calibration --fit-noise` from "
        + ", ".join(f"`docs/results/{e}.json.gz`" for e in sorted({e for f in fitted for e in f.exports}))
        + ", among the runs that fit (each run once).",
        "",
        "| dataset | test examples | cells (runs) | per-example sd | shared share | difficulty | specific "
        "| run-level sd |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in fitted:
        lines.append(
            f"| {f.dataset} | {f.n_test} | {f.cells} ({f.runs}) | {f.total:.2f} | {f.share:.2f} | {f.difficulty:.2f} | "
            f"{f.specific:.2f} | {f.run:.2f} ± {f.run_se:.2f} |"
        )
    lines += [
        "",
        "The check: seed-to-seed sd of accuracy (pp) within a cell, pooled over the cells at each sigma, among",
        f"runs that fit, real and from {draws} simulated copies of the same cells (same runs and test-set size, each",
        "cell at its own accuracy); beside it what per-example flips alone give, and the real sd over every",
        "trained run, fit or not (the runs the regime now keeps out of a verdict).",
        "",
        "| dataset | sigma | cells | real sd | simulated sd [95% range] | flips alone | every trained run (runs) |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in fitted:
        for sigma, (real, sim, low, high) in simulated_sd(rng, f, cells[f.dataset], draws).items():
            n = sum(1 for c in cells[f.dataset] if c.sigma == sigma and c.runs >= 2)
            every, runs = all_runs_sd(cells[f.dataset], sigma)
            lines.append(
                f"| {f.dataset} | {sigma:g} | {n} | {real:.2f} | {sim:.2f} [{low:.2f}, {high:.2f}] | "
                f"{flips_sd(cells[f.dataset], sigma):.2f} | {every:.2f} ({runs}) |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=200)
    args = parser.parse_args()
    fitted, cells = fit_exports()
    print(markdown(fitted, cells, args.draws))


if __name__ == "__main__":
    main()
