"""A claim calibrated on synthetic sweeps with a known truth: how often it gives a false verdict, and
how often it reproduces what is true (its power), read exactly as ``initmem report`` reads a sweep.

Each synthetic sweep scores every run on one test set drawn afresh from a population
(``SharedTestSet``), with every sigma of a seed sharing that seed's parts. ``calibrate_claim`` counts
a claim's verdicts in a world where it is false (``null``) and one where it is true (``true``): the
paper's claims were calibrated so (``benchmarks/calibration.py``, docs/STATISTICS.md), and
``initmem new-plugin claim``'s generated test calibrates a new claim the same way."""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from initmem_core.config import RunConfig
from initmem_core.plugin_system.registry import Registry
from initmem_core.report.claim_groups import read_sweep
from initmem_core.report.claims import claim_named, evaluate_claim
from initmem_core.report.verdicts import CONTRADICTED, REPRODUCED
from initmem_core.tracking.records import CellRecord
from initmem_core.vocabulary import BEST_VAL_EPOCH, BEST_VAL_TEST_ACC, CLOCK_ADAPT, CLOCK_L2, CLOCK_SGD, FIT, VAL_LOSS

#: A world: group -> its true population accuracy (pp) per sigma.
Truths = Mapping[str, Mapping[float, float]]
#: (group, sigma) -> (runs that do not fit, their population accuracy in pp): the last runs of the cell
#: (by seed) never fit their training set, scored far below the runs that did, with ``fit`` 0.
Unfit = dict[tuple[str, float], tuple[int, float]]
#: group -> sigma -> the share of its runs (the first by seed) selected at the horizon's edge (their
#: last epoch: still improving when training ended); the others are selected mid-horizon. A world
#: without it has every run converged.
Edges = Mapping[str, Mapping[float, float]]
#: The epochs a synthetic run trains (its history's last point): an edge run is selected there, the
#: others at half of it.
HORIZON = 30


@dataclass(frozen=True)
class SharedTestSet:
    """Every run scored on one test set of ``n_test`` examples drawn afresh from a population each
    sweep. A run's log-odds of getting example i right is its sigma's level plus normal parts with
    these sds: the example's ``difficulty`` (shared by every run), a part ``specific`` to the group
    and sigma (what that model finds hard), a part of the seed and example (``seed_example``, shared
    by every sigma and group of the seed: its data order and Z), a shift of the run (``run``) and of
    the seed (``seed``). The level is set so that accuracy over the population of examples and seeds
    is the truth."""

    name: str
    difficulty: float = 3.5
    specific: float = 1.5
    seed_example: float = 0.0
    run: float = 0.0
    seed: float = 0.0
    n_test: int = 360

    @property
    def total_sd(self) -> float:
        return math.sqrt(self.difficulty**2 + self.specific**2 + self.seed_example**2 + self.run**2 + self.seed**2)


#: The noise fitted to the committed exports (docs/STATISTICS.md, "The noise model, fitted to the exports"),
#: among the runs that fit: log-odds sds of the example's difficulty (shared by every cell of a test set),
#: the cell's own part and the run's shift, per dataset. Refit by ``benchmarks/noise_model.py`` at bf423f4
#: (retired since: ``git show bf423f4:benchmarks/noise_model.py``).
FITTED = {
    "digits": {"difficulty": 3.53, "specific": 0.13, "run": 0.17},
    "fashion-mnist": {"difficulty": 3.09, "specific": 0.35, "run": 0.10},
}
DIGITS_FITTED = SharedTestSet("fitted digits, 360 examples", **FITTED["digits"], n_test=360)
#: The clocks a group ends on unless a calibration says otherwise: the paper's own setting
#: (docs/STATISTICS.md), where low-rate SGD's T_SGD is 0.03 (a low-rate baseline) and Adam's T_adapt
#: 35 and L2's T_L2 3.5 are past their thresholds.
PAPER_CLOCKS = {CLOCK_SGD: 0.03, CLOCK_L2: 3.5, CLOCK_ADAPT: 35.0}


@functools.cache
def population_level(accuracy: float, sd: float) -> float:
    """The log-odds level whose population accuracy (pp), over a normal spread of sd ``sd``, is ``accuracy``."""
    from scipy import optimize, special

    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    weights = weights / weights.sum()
    return optimize.brentq(lambda a: float((weights * special.expit(a + sd * nodes)).sum()) - accuracy / 100, -30, 30)


def shared_test_sweep(
    rng: np.random.Generator,
    truths: Truths,
    seeds: int,
    model: SharedTestSet,
    configs: Mapping[str, Mapping[str, Any]],
    clocks: Mapping[str, Mapping[str, float]],
    unfit: Unfit | None = None,
    edges: Edges | None = None,
) -> list[CellRecord]:
    """One sweep on one freshly drawn test set: ``truths`` (group -> true population accuracy per
    sigma), ``configs`` (group -> its ``RunConfig`` settings), ``clocks`` (group -> the clock metrics
    its runs end on), ``unfit`` (the last runs of a cell, by seed, that did not fit), ``edges`` (the
    share of a cell's runs selected at the horizon's edge). Every cell trains and logs its per-example
    record, its selected epoch and a validation-loss history to ``HORIZON``."""
    from scipy import special

    n = model.n_test
    difficulty = rng.normal(0, model.difficulty, n)
    seed_example = rng.normal(0, model.seed_example, (seeds, n))
    seed_shift = rng.normal(0, model.seed, seeds)
    records = []
    for group, truth in truths.items():
        for sigma, accuracy in truth.items():
            count, low = (unfit or {}).get((group, sigma), (0, accuracy))
            fits = np.arange(seeds) < seeds - count
            level = np.where(fits, population_level(accuracy, model.total_sd), population_level(low, model.total_sd))
            logits = (
                level[:, None]
                + difficulty
                + rng.normal(0, model.specific, n)
                + seed_example
                + (seed_shift + rng.normal(0, model.run, seeds))[:, None]
            )
            right = rng.random((seeds, n)) < special.expit(logits)
            at_edge = np.arange(seeds) < math.ceil((edges or {}).get(group, {}).get(sigma, 0.0) * seeds - 1e-9)
            records += [
                CellRecord(
                    RunConfig(**configs[group], sigma=sigma, seed=seed),
                    num_classes=10,
                    metrics={
                        BEST_VAL_TEST_ACC: float(right[seed].mean()),
                        FIT: float(fits[seed]),
                        BEST_VAL_EPOCH: float(HORIZON if at_edge[seed] else HORIZON // 2),
                        **clocks[group],
                    },
                    histories={VAL_LOSS: [(0, 2.3), (HORIZON, 0.1)]},
                    test_correct=right[seed],
                )
                for seed in range(seeds)
            ]
    return records


@dataclass(frozen=True)
class ClaimCalibration:
    """A claim's verdicts on ``sweeps`` synthetic sweeps of each world: the share of each verdict
    where the claim is false (``null``) and where it is true (``true``)."""

    claim: str
    sweeps: int
    seeds: int
    null: dict[str, float] = field(default_factory=dict)
    true: dict[str, float] = field(default_factory=dict)

    @property
    def false_verdict_rate(self) -> float:
        """Where the claim is false, the share of sweeps that reproduced it."""
        return self.null.get(REPRODUCED, 0.0)

    @property
    def power(self) -> float:
        """Where the claim is true, the share of sweeps that reproduced it."""
        return self.true.get(REPRODUCED, 0.0)

    @property
    def wrong_way_rate(self) -> float:
        """Where the claim is true, the share of sweeps that contradicted it."""
        return self.true.get(CONTRADICTED, 0.0)

    def __str__(self) -> str:
        return (
            f"claim '{self.claim}' on {self.sweeps} sweeps of {self.seeds} seeds per world: false verdicts "
            f"{self.false_verdict_rate:.1%}, power {self.power:.1%}, contradicted where true {self.wrong_way_rate:.1%}"
        )


def calibrate_claim(
    claim: str,
    *,
    null: Truths,
    true: Truths,
    configs: Mapping[str, Mapping[str, Any]],
    clocks: Mapping[str, Mapping[str, float]] | None = None,
    seeds: int = 4,
    sweeps: int = 100,
    model: SharedTestSet = DIGITS_FITTED,
    seed: int = 0,
    registry: Registry | None = None,
    edges: tuple[Edges | None, Edges | None] = (None, None),
) -> ClaimCalibration:
    """The registered claim ``claim`` on ``sweeps`` synthetic sweeps of the world ``null`` (where it is
    false) and as many of ``true`` (where it is true), each read as ``initmem report`` reads a sweep.
    ``configs``: each group's ``RunConfig`` settings (``{"sgd": {"opt": "sgd", "lr": 0.01}, ...}``);
    ``clocks``: the clock metrics each group's runs end on (default: every clock at 35, inside the
    regime); ``edges``: in the null and the true world, the share of each cell's runs selected at the
    horizon's edge (default: every run converged). Seeded: the same call gives the same figures."""
    spec = claim_named(claim, registry)
    inside = PAPER_CLOCKS
    ends = {group: (clocks or {}).get(group, inside) for group in configs}
    rng = np.random.default_rng(seed)
    shares = []
    for world, edge in zip((null, true), edges, strict=True):
        counts = Counter(
            evaluate_claim(
                spec, read_sweep(shared_test_sweep(rng, world, seeds, model, configs, ends, edges=edge))
            ).verdict
            for _ in range(sweeps)
        )
        shares.append({verdict: count / sweeps for verdict, count in counts.items()})
    return ClaimCalibration(claim, sweeps, seeds, *shares)
