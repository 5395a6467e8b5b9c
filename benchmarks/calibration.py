"""How often initmem's verdicts are wrong: synthetic sweeps with a known truth, fed as ``CellRecord``s
through ``build_report`` and ``evaluate_findings`` exactly as a real sweep is, under several kinds
of noise. Prints, per setting, the false-positive rate, the coverage of the debiased spread's
interval and the power, and can write them into docs/STATISTICS.md.

    python -m benchmarks.calibration                 # 400 sweeps per setting, a few minutes
    python -m benchmarks.calibration --sweeps 100    # quicker, noisier
    python -m benchmarks.calibration --write-docs    # replace the table in docs/STATISTICS.md
    python -m benchmarks.calibration --workers 2     # rows side by side, same table
    python -m benchmarks.calibration --rows 6,23 --sweeps 10000   # two rows, more precisely
    python -m benchmarks.calibration --fit-noise     # refit the noise to docs/results, into docs/STATISTICS.md

A run's test accuracy is drawn as a real one arises: ``n_test`` examples each right with the run's
own accuracy (per-example flips), where the run's accuracy is the truth at its sigma plus a shift
of its own (run-level noise, e.g. the data order a seed fixes) and a shift shared by every run of
the seed (a seed that is lucky everywhere). Failed cells are left out as the report leaves out a
diverged run. Everything is seeded: the same command prints the same table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from initmem_core.config import RunConfig
from initmem_core.report.claim_groups import read_sweep
from initmem_core.report.claims import claim_named, evaluate_claim
from initmem_core.report.inference import MIN_SEEDS
from initmem_core.report.memory import build_report
from initmem_core.report.verdicts import CANNOT_DECIDE, CONTRADICTED, HORIZON_SHORT, REPRODUCED, UNDER_TRAINED
from initmem_core.testing import calibration as synthetic

# population_level: the tests read it here, beside the noise it is fitted with
from initmem_core.testing.calibration import DIGITS_FITTED, FITTED, SharedTestSet, Unfit, population_level  # noqa: F401
from initmem_core.tracking.records import CellRecord

ROOT = Path(__file__).resolve().parents[1]
SIGMAS = (0.1, 0.5, 1.4, 2.5)
#: The truth of a group that remembers 4 pp (the issue's), one that remembers 2 pp, 5 pp, none.
FOUR_PP, TWO_PP, FIVE_PP, FLAT = (97, 96, 95, 93), (97, 96.5, 96, 95), (97, 95, 94, 92), (95, 95, 95, 95)


@dataclass(frozen=True)
class Noise:
    """What moves a run's accuracy, in pp: per-example flips of ``n_test`` examples (always), a
    shift per run, and a shift per seed shared by every sigma and group."""

    name: str
    run_sd: float = 0.0
    seed_sd: float = 0.0
    n_test: int = 360


NOISES = (
    Noise("per-example"),
    Noise("mixed", run_sd=1.0),
    Noise("run-level", run_sd=2.5),
    Noise("seed-shared", run_sd=0.5, seed_sd=2.0),
)
PER_EXAMPLE, RUN_LEVEL = NOISES[0], NOISES[2]
FMNIST_LIKE = Noise("fmnist-like", run_sd=1.5, n_test=500)

GROUPS = {
    "sgd": {"opt": "sgd", "lr": 0.01},
    "adam": {"opt": "adam", "lr": 0.001},
    "adamw": {"opt": "adamw", "lr": 0.001},
    "muon": {"opt": "muon", "lr": 0.01},
    # plain SGD at two more batch sizes (one family: the clock ordering within it)
    "sgd8": {"opt": "sgd", "lr": 0.01, "batch_size": 8},
    "sgd128": {"opt": "sgd", "lr": 0.01, "batch_size": 128},
    # the same with L2 (the near-zero claim), and SGD and Adam on a second architecture (strata)
    "sgd-l2": {"opt": "sgd", "lr": 0.01, "l2": 0.01},
    "sgd-r56": {"opt": "sgd", "lr": 0.01, "arch": "resnet56"},
    "adam-r56": {"opt": "adam", "lr": 0.001, "arch": "resnet56"},
    "sgd-matched": {"opt": "sgd", "lr": 0.01, "lr_match_sigma": 1.0},  # the effective-step control
}
#: The claim most rows read: the first ordering of the paper.
FIRST_CLAIM = "sgd_remembers_more_than_adaptive"


def claim_verdict(records: list[CellRecord], claim: str = FIRST_CLAIM) -> str:
    """One registered claim's verdict on a synthetic sweep, read as a real one is (``read_sweep``, then
    the claim as ``initmem report`` evaluates it)."""
    return evaluate_claim(claim_named(claim), read_sweep(records)).verdict


#: The clocks a synthetic run ends on when a row names none: the paper's own regime (docs/STATISTICS.md,
#: "The regime a verdict needs"), CIFAR-10 at b = 128 for 100 epochs: low-rate SGD at T_SGD 0.03, L2 1e-2
#: at T_L2 3.5, Adam at T_adapt 35. Past report/regime.py's thresholds wherever a mechanism must act, so a
#: row that names no clocks measures the rule inside the regime, as before the regime existed.
REGIME_CLOCKS = {"clock_sgd": 0.03, "clock_l2": 3.5, "clock_adapt": 35.0}


def clock_metrics(group: str, clocks: dict[str, float] | None) -> dict[str, float]:
    """The clock metrics of a run of ``group``: ``clocks[group]`` as its T_SGD and T_adapt (and T_L2 0),
    or with no ``clocks`` the paper's regime (``REGIME_CLOCKS``; T_L2 0 for a group without L2)."""
    if clocks is None:
        shrinks = GROUPS[group].get("l2", 0) + GROUPS[group].get("weight_decay", 0) > 0
        return {**REGIME_CLOCKS, "clock_l2": REGIME_CLOCKS["clock_l2"] if shrinks else 0.0}
    return {"clock_sgd": clocks[group], "clock_l2": 0.0, "clock_adapt": clocks[group]}


def synthetic_sweep(
    rng,
    truths: dict[str, dict[float, float]],
    seeds: int,
    noise: Noise,
    fail: float = 0.0,
    keep_at: dict[float, int] | None = None,
    clocks: dict[str, float] | None = None,
) -> list[CellRecord]:
    """One sweep: ``truths`` maps a group (a key of GROUPS) to its true accuracy (pp) per sigma.
    ``fail``: each cell fails with this probability; ``keep_at``: sigma -> seeds that train there;
    ``clocks``: group -> the forgetting clock its cells end on (T_SGD for SGD, T_adapt otherwise).
    Each trained cell carries its per-example record (``test_correct``), as a real run logs it: here
    every example is equally hard, so the test set has no sampling error of its own."""
    seed_shift = rng.normal(0, noise.seed_sd, seeds)
    records = []
    for group, truth in truths.items():
        for sigma, accuracy in truth.items():
            for seed in range(seeds):
                failed = rng.random() < fail or (keep_at is not None and seed >= keep_at.get(sigma, seeds))
                p = min(max((accuracy + rng.normal(0, noise.run_sd) + seed_shift[seed]) / 100, 0.0), 1.0)
                correct = rng.random(noise.n_test) < p
                clock = clock_metrics(group, clocks)
                records.append(
                    CellRecord(
                        RunConfig(**GROUPS[group], sigma=sigma, seed=seed),
                        status="FAILED" if failed else "FINISHED",
                        num_classes=10,
                        metrics={} if failed else {"best_val_test_acc": float(correct.mean()), "fit": 1.0, **clock},
                        test_correct=None if failed else correct,
                    )
                )
    return records


def on(sigmas: tuple[float, ...], values: tuple[float, ...]) -> dict[float, float]:
    return dict(zip(sigmas, values))


@dataclass
class Row:
    check: str
    noise: str
    seeds: int
    target: str
    measured: str
    detail: str = ""
    number: int = 0  # as printed, from 1: ``--rows`` reruns it
    sweeps: int = 0


def verdict_rate(
    rng, sweeps: int, truths, seeds: int, noise: Noise | SharedTestSet, claim: str = FIRST_CLAIM, **design
) -> dict[str, float]:
    """Share of sweeps with each verdict on the registered claim named ``claim`` (``report.claims.claim_named``).
    ``design``: more of ``synthetic_sweep``'s arguments."""
    counts: dict[str, int] = {}
    for _ in range(sweeps):
        verdict = claim_verdict(draw_sweep(rng, truths, seeds, noise, **design), claim)
        counts[verdict] = counts.get(verdict, 0) + 1
    return {k: v / sweeps for k, v in counts.items()}


def draw_sweep(rng, truths, seeds: int, noise, **design) -> list[CellRecord]:
    """``synthetic_sweep`` under a ``Noise``; ``shared_test_sweep`` under a ``SharedTestSet`` (the fitted
    noise: ``DIGITS_FITTED``...), with the design arguments the latter takes (``clocks``)."""
    if isinstance(noise, SharedTestSet):
        return shared_test_sweep(rng, truths, seeds, noise, **design)
    return synthetic_sweep(rng, truths, seeds, noise, **design)


def coverage(rng, sweeps: int, truth: dict[float, float], seeds: int, noise: Noise, **failures) -> dict[str, float]:
    """How often the debiased interval holds the true spread over the sigmas it measured, its mean,
    the paper's spread's mean, and how often it had no interval."""
    held, estimates, papers, undecided, named = 0, [], [], 0, 0
    for _ in range(sweeps):
        report = build_report(synthetic_sweep(rng, {"sgd": truth}, seeds, noise, **failures))
        group = report.groups[0]
        papers.append(group.spread)
        if "left out" in group.debiased_note:  # what the reader is told
            named += 1
        if math.isnan(group.debiased_spread_lo):
            undecided += 1
            continue
        measured = [truth[s] for s in report.estimates[group.group].sigmas]  # the sigmas it measured
        true_spread = max(measured) - min(measured)
        estimates.append(group.debiased_spread - true_spread)
        held += group.debiased_spread_lo <= true_spread <= group.debiased_spread_hi
    decided = sweeps - undecided
    return {
        "coverage": held / max(decided, 1),
        "bias": float(np.mean(estimates)) if estimates else math.nan,
        "paper": float(np.mean(papers)),
        "undecided": undecided / sweeps,
        "named": named / sweeps,
    }


IDENTICAL = {"sgd": on(SIGMAS, FOUR_PP), "adam": on(SIGMAS, FOUR_PP)}
ALIKE = {group: on(SIGMAS, FOUR_PP) for group in ("sgd", "adam", "adamw", "muon")}  # SGD, three adaptive, alike
#: T_SGD of plain SGD at b = 8, 32, 128 (one family: the clock falls as the batch grows), the largest past
#: report/regime.py's threshold (3) so that the family is inside the regime. (Before the regime these were
#: 100 times smaller; the rank correlation, and so every draw and rate of rows 28-30, does not change.)
CLOCKS = {"sgd8": 4.0, "sgd": 1.0, "sgd128": 0.25}


def identical_groups(rng, sweeps: int, noise: Noise, seeds: int) -> Row:
    rates = verdict_rate(rng, sweeps, IDENTICAL, seeds, noise)
    wrong = rates.get(REPRODUCED, 0) + rates.get(CONTRADICTED, 0)
    return Row(
        "identical groups: a verdict",
        noise.name,
        seeds,
        "<= 6%",
        f"{wrong:.1%}",
        f"reproduced {rates.get(REPRODUCED, 0):.1%}, contradicted {rates.get(CONTRADICTED, 0):.1%}",
    )


def too_few_seeds(rng, sweeps: int) -> Row:
    rates = verdict_rate(rng, sweeps, IDENTICAL, MIN_SEEDS - 1, RUN_LEVEL)
    return Row(
        f"identical groups below {MIN_SEEDS} seeds: cannot be decided",
        RUN_LEVEL.name,
        MIN_SEEDS - 1,
        "100%",
        f"{rates.get(CANNOT_DECIDE, 0):.1%}",
    )


def sgd_against_three(rng, sweeps: int, seeds: int) -> Row:
    rates = verdict_rate(rng, sweeps, ALIKE, seeds, RUN_LEVEL)
    return Row(
        "SGD vs three identical adaptive groups: a verdict",
        RUN_LEVEL.name,
        seeds,
        "<= 6%",
        f"{rates.get(REPRODUCED, 0) + rates.get(CONTRADICTED, 0):.1%}",
        f"contradicted {rates.get(CONTRADICTED, 0):.1%}, reproduced {rates.get(REPRODUCED, 0):.1%}",
    )


def flat_group(rng, sweeps: int, noise: Noise) -> Row:
    truth = on(SIGMAS, (85,) * 4) if noise == FMNIST_LIKE else on(SIGMAS, FLAT)
    c = coverage(rng, sweeps, truth, 6, noise)
    return Row(
        "flat group (true spread 0): interval holds 0",
        noise.name,
        6,
        ">= 90%",
        f"{c['coverage']:.1%}",
        f"mean debiased {c['bias']:+.2f} pp, mean paper's spread {c['paper']:.2f} pp",
    )


def five_pp(rng, sweeps: int, noise: Noise, label: str, failures: dict) -> Row:
    c = coverage(rng, sweeps, on(SIGMAS, FIVE_PP), 6, noise, **failures)
    return Row(
        f"true spread 5 pp, {label}: covered",
        noise.name,
        6,
        ">= 92%",
        f"{c['coverage']:.1%}",
        f"bias {c['bias']:+.2f} pp, no interval in {c['undecided']:.1%}",
    )


def one_trained_seed(rng, sweeps: int) -> Row:
    c = coverage(rng, sweeps, on(SIGMAS, FIVE_PP), 6, RUN_LEVEL, keep_at={2.5: 1})
    return Row(
        "true spread 5 pp, worst sigma with 1 of 6 trained: that sigma named as left out",
        RUN_LEVEL.name,
        6,
        "100%",
        f"{c['named']:.1%}",
        f"spread over the other sigmas covered in {c['coverage']:.1%}",
    )


def unequal_sigma_sets(rng, sweeps: int) -> Row:
    seven = (0.1, 0.3, 0.5, 0.9, 1.4, 2.0, 2.5)
    unequal = {"sgd": on(seven, (95,) * 7), "adam": on((0.1, 2.5), (95, 95))}
    bias, reproduced = [], 0
    for _ in range(sweeps):
        records = synthetic_sweep(rng, unequal, 6, PER_EXAMPLE)
        pair = build_report(records).pairs[0]  # adam - sgd (groups sorted)
        bias.append(-pair.spread_diff)
        reproduced += claim_verdict(records) == REPRODUCED
    return Row(
        "SGD at 7 sigmas vs Adam at the 2 ends, flat truth: 'reproduced'",
        PER_EXAMPLE.name,
        6,
        "<= 2.5%",
        f"{reproduced / sweeps:.1%}",
        f"mean SGD − Adam {np.mean(bias):+.2f} pp (no bias: 0)",
    )


def moved(accuracies: tuple[float, ...], shift: float) -> tuple[float, ...]:
    """A truth with every accuracy moved by ``shift`` pp (a dataset that is harder to fit)."""
    return tuple(a + shift for a in accuracies)


def shifted(shift: float) -> str:
    """What a row's check adds when its truths are moved: ", accuracies -20 pp"."""
    return f", accuracies {shift:+g} pp" if shift else ""


def power(rng, sweeps: int, noise: Noise | SharedTestSet, seeds: int, shift: float = 0.0) -> Row:
    truths = {"sgd": on(SIGMAS, moved(FOUR_PP, shift)), "adam": on(SIGMAS, moved(TWO_PP, shift))}
    rates = verdict_rate(rng, sweeps, truths, seeds, noise)
    return Row(
        f"power: spread 4 pp vs 2 pp{shifted(shift)}, 'reproduced'",
        noise.name,
        seeds,
        ">= 50%" if (noise, seeds) == (DIGITS_FITTED, 6) else "(as high as the noise allows)",
        f"{rates.get(REPRODUCED, 0):.1%}",
    )


FAMILY_ALIKE = {group: on(SIGMAS, FOUR_PP) for group in CLOCKS}
CLOCK_CLAIM = "spread_orders_by_clock_within_family"


def clock_ordering_alike(rng, sweeps: int, seeds: int) -> Row:
    """Plain SGD at three batch sizes (one family, three T_SGD) that remember alike."""
    rates = verdict_rate(rng, sweeps, FAMILY_ALIKE, seeds, RUN_LEVEL, claim=CLOCK_CLAIM, clocks=CLOCKS)
    return Row(
        "clock ordering within one family, three identical groups: a verdict",
        RUN_LEVEL.name,
        seeds,
        "<= 6%",
        f"{rates.get(REPRODUCED, 0) + rates.get(CONTRADICTED, 0):.1%}",
        f"reproduced {rates.get(REPRODUCED, 0):.1%}, contradicted {rates.get(CONTRADICTED, 0):.1%}",
    )


def clock_ordering_power(rng, sweeps: int) -> Row:
    ordered = {"sgd8": on(SIGMAS, TWO_PP), "sgd": on(SIGMAS, FOUR_PP), "sgd128": on(SIGMAS, (97, 95.5, 94, 91))}
    rates = verdict_rate(rng, sweeps, ordered, 6, PER_EXAMPLE, claim=CLOCK_CLAIM, clocks=CLOCKS)  # 2/4/6 pp
    return Row(
        "power: clock ordering within one family, spreads 2/4/6 pp as T_SGD falls, 'reproduced'",
        PER_EXAMPLE.name,
        6,
        "(as high as the noise allows)",
        f"{rates.get(REPRODUCED, 0):.1%}",
    )


# The three claims added with issue 29 (training longer, a larger rate, depth). Their groups are
# drawn by ``synthetic_sweep`` under two of GROUPS' names, then given the configurations the claim
# reads (``as_groups``): the noise is exactly the other rows'.
SHORT, LONG = {"opt": "sgd", "lr": 0.01, "epochs": 10}, {"opt": "sgd", "lr": 0.01, "epochs": 100}
LOW_LR, HIGH_LR = {"opt": "sgd", "lr": 0.01, "epochs": 15}, {"opt": "sgd", "lr": 0.1, "epochs": 15}
#: T_SGD at the end of the short and long horizons (digits, b = 32: 34 steps an epoch).
HORIZON_CLOCKS = {"sgd": 0.0011, "adam": 0.011}
HALF_OF_FOUR, KEEPS_80, NO_MEMORY = TWO_PP, (97, 95.4, 94.6, 93.0), FLAT  # 2 pp, 4 pp (of 5), 0 pp
CLAIM_NAMES = {
    "longer": "longer_training_keeps_sgd_memory",
    "lr": "larger_lr_makes_sgd_forget",
    "depth": "deep_nets_fail_to_interpolate",
}
#: The long horizon keeping exactly the share the claim requires of the short one's 4 pp (3 pp).
KEEPS_MARGIN = (97, 96, 95, 94)
#: The digits presets for these claims (paper-long-mini, paper-lr-mini) train at the paper's two ends of
#: sigma only (the claims read the gap between the best and worst sigma, and SGD's accuracy falls
#: with sigma monotonically in paper-mini), so their rows draw the same two sigmas.
ENDS = (0.1, 2.5)


def ends(values: tuple[float, ...]) -> dict[float, float]:
    """A truth at the two ends of sigma: the first and last of a four-sigma truth."""
    return on(ENDS, (values[0], values[-1]))


def as_groups(records: list[CellRecord], configs: dict[str, dict]) -> list[CellRecord]:
    """The records of each synthetic group (``sgd``, ``adam``) with that group's claim configuration."""
    for record in records:
        name = "sgd" if record.config.opt == "sgd" else "adam"
        record.config = RunConfig(**configs[name], sigma=record.config.sigma, seed=record.config.seed)
    return records


def claim_rates(
    rng,
    sweeps: int,
    truths,
    seeds: int,
    noise: Noise | SharedTestSet,
    claim: str,
    configs: dict[str, dict],
    clocks: dict[str, float] | None = None,
) -> dict[str, float]:
    """Share of sweeps with each verdict on one of the new claims (read alone: ``read_sweep`` and the claim)."""
    counts: dict[str, int] = {}
    for _ in range(sweeps):
        records = as_groups(draw_sweep(rng, truths, seeds, noise, clocks=clocks), configs)
        verdict = claim_verdict(records, CLAIM_NAMES[claim])
        counts[verdict] = counts.get(verdict, 0) + 1
    return {k: v / sweeps for k, v in counts.items()}


def _verdict_row(
    check: str, noise: Noise | SharedTestSet, seeds: int, target: str, rates: dict[str, float], wrong: bool
) -> Row:
    r, c = rates.get(REPRODUCED, 0), rates.get(CONTRADICTED, 0)
    return Row(
        check,
        noise.name,
        seeds,
        target,
        f"{r + c:.1%}" if wrong else f"{r:.1%}",
        f"reproduced {r:.1%}, contradicted {c:.1%}",
    )


def longer_at_margin(rng, sweeps: int, noise: Noise, seeds: int) -> Row:
    """The long horizon kept exactly the claim's share (75%) of the short one's 4 pp: neither verdict is true."""
    truths = {"sgd": ends(FOUR_PP), "adam": ends(KEEPS_MARGIN)}
    rates = claim_rates(rng, sweeps, truths, seeds, noise, "longer", {"sgd": SHORT, "adam": LONG}, HORIZON_CLOCKS)
    return _verdict_row(
        "training longer, long keeps exactly 75% of 4 pp (the margin): a verdict", noise, seeds, "<= 6%", rates, True
    )


def longer_forgot(rng, sweeps: int, noise: Noise, seeds: int) -> Row:
    truths = {"sgd": ends(FOUR_PP), "adam": ends(NO_MEMORY)}
    rates = claim_rates(rng, sweeps, truths, seeds, noise, "longer", {"sgd": SHORT, "adam": LONG}, HORIZON_CLOCKS)
    return _verdict_row(
        "training longer, long forgot all of 4 pp: 'reproduced'",
        noise,
        seeds,
        "<= 2.5%",
        {REPRODUCED: rates.get(REPRODUCED, 0)},
        False,
    )


def longer_power(
    rng,
    sweeps: int,
    noise: Noise | SharedTestSet,
    seeds: int,
    long: tuple[float, ...],
    label: str,
    shift: float = 0.0,
) -> Row:
    truths = {"sgd": ends(moved(FIVE_PP, shift)), "adam": ends(moved(long, shift))}
    rates = claim_rates(rng, sweeps, truths, seeds, noise, "longer", {"sgd": SHORT, "adam": LONG}, HORIZON_CLOCKS)
    return _verdict_row(
        f"power: training longer, long keeps {label} of 5 pp{shifted(shift)}, 'reproduced'",
        noise,
        seeds,
        "(as high as the noise allows)",
        rates,
        False,
    )


#: T_SGD of the low and the 10x larger rate (100x the clock): the larger one past the regime's threshold.
LR_CLOCKS = {"sgd": 0.035, "adam": 3.5}


def lr_identical(rng, sweeps: int, noise: Noise, seeds: int) -> Row:
    truths = {"sgd": ends(FOUR_PP), "adam": ends(FOUR_PP)}
    rates = claim_rates(rng, sweeps, truths, seeds, noise, "lr", {"sgd": LOW_LR, "adam": HIGH_LR}, LR_CLOCKS)
    return _verdict_row("larger rate, identical spreads: a verdict", noise, seeds, "<= 6%", rates, True)


def lr_power(
    rng,
    sweeps: int,
    noise: Noise | SharedTestSet,
    seeds: int,
    high: tuple[float, ...],
    label: str,
    shift: float = 0.0,
) -> Row:
    truths = {"sgd": ends(moved(FIVE_PP, shift)), "adam": ends(moved(high, shift))}
    rates = claim_rates(rng, sweeps, truths, seeds, noise, "lr", {"sgd": LOW_LR, "adam": HIGH_LR}, LR_CLOCKS)
    return _verdict_row(
        f"power: larger rate, spread 5 pp vs {label}{shifted(shift)}, 'reproduced'",
        noise,
        seeds,
        "(as high as the noise allows)",
        rates,
        False,
    )


#: Interpolation noise: a seed's shift of every cell's log-odds of interpolating (one seed's data
#: order eases or hardens fitting at every depth and sigma), the depth claim's analogue of seed-shared noise.
DEPTH_NOISES = {"independent": 0.0, "seed-shared": 1.5}
DEPTHS = ("resnet20", "resnet56", "resnet110")


def depth_sweep(rng, rates: dict[str, tuple[float, float]], seeds: int, seed_sd: float) -> list[CellRecord]:
    """Cells at sigma 0.1 and 2.5 per architecture; each interpolates (logs ``tau_interp``) with
    the architecture's chance at that sigma, shifted in log-odds by its seed's draw."""
    shift = rng.normal(0, seed_sd, seeds)
    records = []
    for arch, chances in rates.items():
        for sigma, chance in zip((0.1, 2.5), chances):
            for seed in range(seeds):
                logit = math.log(chance / (1 - chance)) if 0 < chance < 1 else math.copysign(math.inf, chance - 0.5)
                p = 1 / (1 + math.exp(-(logit + shift[seed]))) if math.isfinite(logit) else float(chance >= 1)
                metrics = {"best_val_test_acc": 0.95 + 0.01 * rng.standard_normal()}
                if rng.random() < p:
                    metrics["tau_interp"] = 5.0
                records.append(
                    CellRecord(
                        RunConfig(opt="sgd", lr=0.01, arch=arch, sigma=sigma, seed=seed),
                        num_classes=10,
                        metrics=metrics,
                    )
                )
    return records


def depth_rates(rng, sweeps: int, rates, seeds: int, noise: str) -> dict[str, float]:
    counts: dict[str, int] = {}
    for _ in range(sweeps):
        verdict = claim_verdict(depth_sweep(rng, rates, seeds, DEPTH_NOISES[noise]), CLAIM_NAMES["depth"])
        counts[verdict] = counts.get(verdict, 0) + 1
    return {k: v / sweeps for k, v in counts.items()}


def depth_check(
    rng, sweeps: int, noise: str, seeds: int, rates: dict[str, tuple[float, float]], label: str, false: bool
) -> Row:
    found = depth_rates(rng, sweeps, rates, seeds, noise)
    r, c = found.get(REPRODUCED, 0), found.get(CONTRADICTED, 0)
    return Row(
        f"{'' if false else 'power: '}depth, {label}: {'a verdict' if false else repr('reproduced')}",
        noise,
        seeds,
        "<= 6%" if false else "(as high as the noise allows)",
        f"{r + c:.1%}" if false else f"{r:.1%}",
        f"reproduced {r:.1%}, contradicted {c:.1%}",
    )


#: Interpolation chances (sigma 0.1, sigma 2.5) per architecture.
DEPTH_ALIKE = {arch: (1.0, 0.5) for arch in DEPTHS}  # depth changes nothing; large sigma a coin toss
DEPTH_EVERYWHERE = {"resnet20": (1.0, 1.0), "resnet56": (0.3, 0.3), "resnet110": (0.3, 0.3)}  # deep fail at every sigma
DEPTH_CLAIMED = {"resnet20": (1.0, 1.0), "resnet56": (1.0, 0.2), "resnet110": (1.0, 0.2)}
DEPTH_WEAKER = {"resnet20": (1.0, 0.9), "resnet56": (1.0, 0.4), "resnet110": (1.0, 0.4)}


def new_claim_checks() -> list[tuple]:
    rows: list[tuple] = [(longer_at_margin, (noise, seeds)) for noise in (PER_EXAMPLE, RUN_LEVEL) for seeds in (4, 6)]
    rows += [(longer_forgot, (RUN_LEVEL, 6))]
    rows += [
        (longer_power, (DIGITS_FITTED, seeds, long, label))
        for seeds in (4, 6, 8)
        for long, label in ((FIVE_PP, "all"), (KEEPS_80, "80%"))
    ]
    rows += [(lr_identical, (noise, seeds)) for noise in (PER_EXAMPLE, RUN_LEVEL) for seeds in (4, 6)]
    rows += [
        (lr_power, (DIGITS_FITTED, seeds, high, label))
        for seeds in (4, 6)
        for high, label in ((TWO_PP, "2 pp"), (FLAT, "0 pp"))
    ]
    rows += [
        (depth_check, (noise, seeds, DEPTH_ALIKE, "all depths alike (1.0, 0.5)", True))
        for noise in DEPTH_NOISES
        for seeds in (4, 6)
    ]
    rows += [
        (depth_check, ("seed-shared", seeds, DEPTH_EVERYWHERE, "deep fail at every sigma (0.3)", True))
        for seeds in (4, 6)
    ]
    rows += [
        (depth_check, ("seed-shared", seeds, rates, label, False))
        for seeds in (3, 4, 6)
        for rates, label in (
            (DEPTH_CLAIMED, "deep 0.2 at sigma 2.5, shallow 1.0"),
            (DEPTH_WEAKER, "deep 0.4 at sigma 2.5, shallow 0.9"),
        )
    ]
    return rows


# -- A shared test set (issue 29) -------------------------------------------------------------------
# In a real sweep every run is scored on the same test examples, and examples differ in difficulty,
# so runs' errors overlap and the test set's own sampling error is shared by every run. The rows
# below draw a fresh test set from a population each sweep and check the debiased spread's interval
# against the *population* spread, and identical groups' false verdicts.


#: Two mixes: per-example noise alone (two runs of one sigma share 52% of their errors, of two
#: sigmas 38%), and one with seed-shared and run-level parts too (48% and 38%).
SHARED_TEST_SETS = (
    SharedTestSet("shared test set"),
    SharedTestSet("shared test set, mixed", difficulty=3.5, specific=1.0, seed_example=0.6, run=0.2, seed=0.2),
)


FMNIST_FITTED = SharedTestSet("fitted Fashion-MNIST, 500 examples", **FITTED["fashion-mnist"], n_test=500)
#: A CIFAR-size test set: no CIFAR export is committed, so Fashion-MNIST's fitted noise (the harder of the
#: two datasets, its run-level shift included) on 10,000 examples.
LARGE_FITTED = SharedTestSet("fitted Fashion-MNIST, 10,000 examples", **FITTED["fashion-mnist"], n_test=10_000)


def shared_test_sweep(
    rng,
    truths: dict[str, dict[float, float]],
    seeds: int,
    model: SharedTestSet,
    clocks: dict[str, float] | None = None,
    unfit: Unfit | None = None,
) -> list[CellRecord]:
    """``testing.calibration.shared_test_sweep`` of the groups of ``GROUPS``, each ending on its
    ``clock_metrics``: one sweep on one freshly drawn test set, every cell trained."""
    ends = {group: clock_metrics(group, clocks) for group in truths}
    return synthetic.shared_test_sweep(rng, truths, seeds, model, GROUPS, ends, unfit)


#: Population truths with a 5 pp spread whose best or worst sigma has a close rival.
SHARED_TRUTHS = {
    "best and runner-up 1 pp apart": (97, 96, 94, 92),
    "best and runner-up 2 pp apart": FIVE_PP,
    "a near-tied worst (0.5 pp)": (97, 95, 92.5, 92),
    "two tied tops": (97, 97, 94, 92),
}


def population_coverage(rng, sweeps: int, model: SharedTestSet, seeds: int, label: str) -> Row:
    """How often the debiased interval holds the population spread; beside it, how often the
    interval from the seeds alone (what the report gave before) would have."""
    from initmem_core.report.inference import interval_around, satterthwaite

    truth = on(SIGMAS, SHARED_TRUTHS[label])
    held = seeds_only = 0
    errors = []
    for _ in range(sweeps):
        (estimate,) = build_report(shared_test_sweep(rng, {"sgd": truth}, seeds, model)).estimates.values()
        target = max(truth[s] for s in estimate.sigmas) - min(truth[s] for s in estimate.sigmas)
        held += estimate.lo <= target <= estimate.hi
        low, high = interval_around(estimate.estimate, estimate.seed_se, satterthwaite(estimate.components)[1])
        seeds_only += low <= target <= high
        errors.append(estimate.estimate - target)
    return Row(
        f"population spread 5 pp, {label}: covered",
        model.name,
        seeds,
        ">= 92%",
        f"{held / sweeps:.1%}",
        f"bias {np.mean(errors):+.2f} pp; the seeds-alone interval: {seeds_only / sweeps:.1%}",
    )


def shared_rates(
    rng, sweeps: int, truths, seeds: int, model: SharedTestSet, claim: str = FIRST_CLAIM
) -> dict[str, float]:
    """Share of sweeps on one shared test set (``shared_test_sweep``) with each verdict on ``claim``."""
    counts: dict[str, int] = {}
    for _ in range(sweeps):
        verdict = claim_verdict(shared_test_sweep(rng, truths, seeds, model), claim)
        counts[verdict] = counts.get(verdict, 0) + 1
    return {k: v / sweeps for k, v in counts.items()}


def shared_identical_groups(rng, sweeps: int, model: SharedTestSet, seeds: int) -> Row:
    rates = shared_rates(rng, sweeps, IDENTICAL, seeds, model)
    return _verdict_row("identical groups (population), one test set: a verdict", model, seeds, "<= 6%", rates, True)


def population_against_test_set(rng, sweeps: int, noise, seeds: int, label: str) -> Row:
    """On the same sweeps, how often the difference of SGD's and Adam's debiased spreads excludes
    zero with the population interval and with the seeds-alone one (records dropped). The first
    always contains the second, so it can only decide less: this is what that costs in power, and
    buys in false verdicts, where the test set has (shared test set) or has not (the others) an
    error of its own."""
    from initmem_core.report.inference import spread_difference
    from initmem_core.report.memory import accuracy_matrix

    truths = {"sgd": on(SIGMAS, FOUR_PP), "adam": on(SIGMAS, FOUR_PP if label == "identical" else TWO_PP)}
    population = seeds_only = 0
    for _ in range(sweeps):
        records = (
            shared_test_sweep(rng, truths, seeds, noise)
            if isinstance(noise, SharedTestSet)
            else synthetic_sweep(rng, truths, seeds, noise)
        )
        tables = [accuracy_matrix([r for r in records if r.config.opt == group]) for group in ("sgd", "adam")]
        d = spread_difference(*tables)
        population += d.lo > 0 or d.hi < 0
        d = spread_difference(*(dict(t) for t in tables))  # no records: for this test set
        seeds_only += d.lo > 0 or d.hi < 0
    what = (
        "identical groups: the interval excludes 0" if label == "identical" else "4 pp vs 2 pp: the interval excludes 0"
    )
    return Row(
        f"population vs seeds-alone interval, {what}",
        noise.name,
        seeds,
        "<= 6%" if label == "identical" else "(as high as the noise allows)",
        f"{population / sweeps:.1%}",
        f"seeds alone, same sweeps: {seeds_only / sweeps:.1%}",
    )


def shared_test_set_checks() -> list[tuple]:
    rows: list[tuple] = [(shared_identical_groups, (model, seeds)) for model in SHARED_TEST_SETS for seeds in (4, 6)]
    rows += [
        (population_coverage, (model, seeds, label))
        for model in SHARED_TEST_SETS
        for seeds in (4, 6)
        for label in SHARED_TRUTHS
    ]
    rows += [
        (population_against_test_set, (noise, 6, label))
        for noise, label in (
            (PER_EXAMPLE, "power"),
            (PER_EXAMPLE, "identical"),
            (RUN_LEVEL, "identical"),
            (SHARED_TEST_SETS[1], "power"),
            (SHARED_TEST_SETS[1], "identical"),
        )
    ]
    return rows


def three_seed_checks() -> list[tuple]:
    """The new claims at three seeds, the fewest the rule decides at (paper-lr-mini, paper-long-mini and
    paper-depth-mini ran three of their six when the CPU they shared ran short): after every other row, so
    that adding them renumbered none."""
    rows: list[tuple] = [(longer_at_margin, (noise, 3)) for noise in (PER_EXAMPLE, RUN_LEVEL)]
    rows += [(longer_power, (DIGITS_FITTED, 3, long, label)) for long, label in ((FIVE_PP, "all"), (KEEPS_80, "80%"))]
    rows += [(lr_identical, (noise, 3)) for noise in (PER_EXAMPLE, RUN_LEVEL)]
    rows += [(lr_power, (DIGITS_FITTED, 3, high, label)) for high, label in ((TWO_PP, "2 pp"), (FLAT, "0 pp"))]
    rows += [(depth_check, (noise, 3, DEPTH_ALIKE, "all depths alike (1.0, 0.5)", True)) for noise in DEPTH_NOISES]
    return rows


# -- Equivalence claims (issue 36): "forgets" and "near zero" as a debiased spread below a quarter of
# low-rate SGD's, on one shared test set (a fresh draw each sweep, every run scoring it, seeds shared
# across sigma and group), at digits' 360 examples and at a CIFAR-size 10,000.
EIGHT_PP = (97, 94, 92, 89)
#: 2 pp: exactly the margin, a quarter of 8 pp; 4 pp: half of it (must never read "forgets").
AT_THE_MARGIN, HALF_OF_EIGHT = (97, 96.5, 95.5, 95), FOUR_PP
#: claim -> (its baseline group, the group claimed to forget), of GROUPS.
FORGET_CLAIMS = {
    "adaptive_optimizers_forget": ("sgd", "adam"),
    "l2_brings_spread_near_zero": ("sgd", "sgd-l2"),
    "effective_step_explains_memory": ("sgd", "sgd-matched"),
}
FORGET_TRUTHS = {
    "at the margin (2 pp of 8)": (AT_THE_MARGIN, "a verdict", "<= 5%"),
    "flat (0 pp of 8)": (FLAT, "power, 'reproduced'", "(stated)"),
    "half (4 pp of 8)": (HALF_OF_EIGHT, "'reproduced'", "<= 2.5%"),
}


def forget_check(rng, sweeps: int, claim: str, model: SharedTestSet, seeds: int, truth: str, shift: float = 0.0) -> Row:
    """``shift``: every truth's accuracies moved by that many pp (a dataset that is harder to fit:
    near 80% an example's flips are noisier than near 95%)."""
    base, other = FORGET_CLAIMS[claim]
    values, what, target = FORGET_TRUTHS[truth]

    truths = {base: on(SIGMAS, moved(EIGHT_PP, shift)), other: on(SIGMAS, moved(values, shift))}
    rates = shared_rates(rng, sweeps, truths, seeds, model, claim)
    return _verdict_row(f"{claim}, {truth}{shifted(shift)}: {what}", model, seeds, target, rates, what == "a verdict")


def two_architectures_null(rng, sweeps: int, model: SharedTestSet, seeds: int) -> Row:
    """SGD and Adam alike within each architecture (ResNet-20: both 8 pp; ResNet-56: both flat): the
    first claim must compare within an architecture, never ResNet-56 SGD with ResNet-20 Adam."""
    truths = {
        "sgd": on(SIGMAS, EIGHT_PP),
        "adam": on(SIGMAS, EIGHT_PP),
        "sgd-r56": on(SIGMAS, FLAT),
        "adam-r56": on(SIGMAS, FLAT),
    }
    rates = shared_rates(rng, sweeps, truths, seeds, model)
    return _verdict_row(
        "two architectures, SGD and Adam alike within each: a verdict on the first claim",
        model,
        seeds,
        "<= 15%",
        rates,
        True,
    )


def equivalence_checks() -> list[tuple]:
    """After every earlier row, so that adding them renumbered none."""
    rows: list[tuple] = [(two_architectures_null, (SHARED_TEST_SETS[0], seeds)) for seeds in (4, 6)]
    rows += [
        (forget_check, (claim, model, seeds, truth))
        for claim in FORGET_CLAIMS
        for model in (DIGITS_FITTED, LARGE_FITTED)
        for seeds in (4, 6)
        for truth in FORGET_TRUTHS
    ]
    return rows


#: paper-effstep-fmnist's test set (500 examples) and its accuracies, 20 pp below digits' (69-77%
#: for the 8 pp truth: paper-lr-fmnist's low-rate SGD scored 65-79% on the test set, digits' 93-99%).
FMNIST_SHIFT = -20.0


def fmnist_effstep_checks() -> list[tuple]:
    """What a paper-effstep-fmnist would be sized by: at paper-fmnist's 500 test images and at the
    dataset's 10,000. After every earlier row, so that adding them renumbered none."""
    return [
        (forget_check, ("effective_step_explains_memory", model, seeds, truth, FMNIST_SHIFT))
        for model in (FMNIST_FITTED, LARGE_FITTED)  # 10,000: Fashion-MNIST's whole test set
        for seeds in (4, 6)
        for truth in FORGET_TRUTHS
    ]


# -- The regime a verdict needs (report/regime.py): a claim decides only among runs that fit, and "X forgets"
# is contradicted only where X's clock has run past its threshold. On the fitted noise; each row's detail
# gives what the same sweeps read with the regime's check undone (every run marked as fit, or the clock
# set past its threshold): what the row would measure if the check were missing.

#: Plain SGD flat (95%) wherever it fit; its runs that never fit, at the largest sigma, score 70%.
FLAT_WHERE_FIT, UNFIT_ACCURACY = FLAT, 70.0
#: Adam keeping 80% of SGD's 8 pp spread (6.4 pp: far above the quarter "forgets" allows).
KEEPS_80_OF_EIGHT = tuple(97 - 0.8 * (97 - a) for a in EIGHT_PP)


def _everything_fit(records: list[CellRecord]) -> list[CellRecord]:
    return [dataclasses.replace(r, metrics={**r.metrics, "fit": 1.0}) for r in records]


def _clocks_past(records: list[CellRecord]) -> list[CellRecord]:
    return [dataclasses.replace(r, metrics={**r.metrics, **REGIME_CLOCKS}) for r in records]


def regime_rates(rng, sweeps: int, truths, seeds: int, model: SharedTestSet, claim: str, undo, **design):
    """The verdict shares on ``claim``, and on the same sweeps with the regime's check undone (``undo``)."""
    counts: dict[str, int] = {}
    undone: dict[str, int] = {}
    for _ in range(sweeps):
        records = shared_test_sweep(rng, truths, seeds, model, **design)
        verdict = claim_verdict(records, claim)
        counts[verdict] = counts.get(verdict, 0) + 1
        verdict = claim_verdict(undo(records), claim)
        undone[verdict] = undone.get(verdict, 0) + 1
    return {k: v / sweeps for k, v in counts.items()}, {k: v / sweeps for k, v in undone.items()}


def never_fits_at_large_sigma(rng, sweeps: int, model: SharedTestSet, seeds: int, unfit_runs: int) -> Row:
    """SGD flat wherever it fit, ``unfit_runs`` of its runs at sigma 2.5 never fit (70%); Adam flat and fit."""
    truths = {"sgd": on(SIGMAS, FLAT_WHERE_FIT), "adam": on(SIGMAS, FLAT_WHERE_FIT)}
    unfit = {("sgd", SIGMAS[-1]): (unfit_runs, UNFIT_ACCURACY)}
    rates, undone = regime_rates(rng, sweeps, truths, seeds, model, FIRST_CLAIM, _everything_fit, unfit=unfit)
    which = "all" if unfit_runs == seeds else f"{unfit_runs} of {seeds}"
    r = rates.get(REPRODUCED, 0)
    return Row(
        f"regime: SGD flat where it fit, {which} runs at sigma 2.5 never fit (70%): first claim 'reproduced'",
        model.name,
        seeds,
        "<= 10%",
        f"{r:.1%} ± {math.sqrt(r * (1 - r) / sweeps):.1%}",
        f"under-trained {rates.get(UNDER_TRAINED, 0):.1%}; every run read as fit: reproduced "
        f"{undone.get(REPRODUCED, 0):.1%}",
    )


def adam_keeps_most(rng, sweeps: int, model: SharedTestSet, seeds: int, clock: float) -> Row:
    """Adam keeps 80% of SGD's 8 pp spread, its T_adapt at ``clock`` (the threshold is 3)."""
    truths = {"sgd": on(SIGMAS, EIGHT_PP), "adam": on(SIGMAS, KEEPS_80_OF_EIGHT)}
    claim = "adaptive_optimizers_forget"
    clocks = {"sgd": REGIME_CLOCKS["clock_sgd"], "adam": clock}
    rates, undone = regime_rates(rng, sweeps, truths, seeds, model, claim, _clocks_past, clocks=clocks)
    c = rates.get(CONTRADICTED, 0)
    short = clock < 3
    return Row(
        f"regime: Adam keeps 80% of SGD's 8 pp, T_adapt {clock:g}: {claim} 'contradicted'",
        model.name,
        seeds,
        "<= 10%" if short else "(most)",
        f"{c:.1%} ± {math.sqrt(c * (1 - c) / sweeps):.1%}",
        f"horizon short {rates.get(HORIZON_SHORT, 0):.1%}, reproduced {rates.get(REPRODUCED, 0):.1%}"
        + (f"; clock read as past: contradicted {undone.get(CONTRADICTED, 0):.1%}" if short else ""),
    )


def in_regime_identical(rng, sweeps: int, model: SharedTestSet, seeds: int) -> Row:
    """Identical groups, every run fit and every clock past: the rule as before the regime."""
    rates = shared_rates(rng, sweeps, IDENTICAL, seeds, model)
    out = sum(rates.get(v, 0) for v in (UNDER_TRAINED, HORIZON_SHORT))
    row = _verdict_row("regime: identical groups inside the regime: a verdict", model, seeds, "<= 6%", rates, True)
    return dataclasses.replace(row, detail=f"{row.detail}; out of the regime {out:.1%}")


def regime_checks() -> list[tuple]:
    """After every earlier row, so that adding them renumbered none."""
    rows: list[tuple] = [
        (never_fits_at_large_sigma, (model, 6, unfit)) for model in (DIGITS_FITTED, LARGE_FITTED) for unfit in (6, 2)
    ]
    rows += [(adam_keeps_most, (model, 6, clock)) for model in (DIGITS_FITTED, LARGE_FITTED) for clock in (0.5, 30.0)]
    rows += [(in_regime_identical, (DIGITS_FITTED, seeds)) for seeds in (4, 6)]
    return rows


def preset_power_checks() -> list[tuple]:
    """The power the Fashion-MNIST and CIFAR presets quote, on their own fitted noise: Fashion-MNIST at
    its accuracies (``FMNIST_SHIFT``: paper-fmnist, paper-lr-fmnist, paper-long-fmnist) on the 500 test
    images its exports scored and on the 10,000 its runs now score at the selected checkpoint, and a
    CIFAR-size 10,000 at digits' accuracies (``LARGE_FITTED``: paper-resnet9, paper-batch, paper-l2,
    paper-long). After every earlier row, so that adding them renumbered none."""
    rows: list[tuple] = [(power, (FMNIST_FITTED, seeds, FMNIST_SHIFT)) for seeds in (4, 6)]
    rows += [(power, (LARGE_FITTED, 6))]
    rows += [
        (lr_power, (FMNIST_FITTED, 6, high, label, FMNIST_SHIFT)) for high, label in ((TWO_PP, "2 pp"), (FLAT, "0 pp"))
    ]
    rows += [
        (longer_power, (model, 6, long, label, shift))
        for model, shift in ((FMNIST_FITTED, FMNIST_SHIFT), (LARGE_FITTED, 0.0))
        for long, label in ((FIVE_PP, "all"), (KEEPS_80, "80%"))
    ]
    # The Fashion-MNIST presets as they now run: --eval-size caps what is scored each epoch, and the selected
    # checkpoint is scored once on the whole test split, so a claim reads 10,000 per-example records.
    rows += [(power, (LARGE_FITTED, 4, FMNIST_SHIFT))]
    rows += [
        (lr_power, (LARGE_FITTED, 6, high, label, FMNIST_SHIFT)) for high, label in ((TWO_PP, "2 pp"), (FLAT, "0 pp"))
    ]
    rows += [
        (longer_power, (LARGE_FITTED, 6, long, label, FMNIST_SHIFT))
        for long, label in ((FIVE_PP, "all"), (KEEPS_80, "80%"))
    ]
    return rows


def checks() -> list[tuple]:
    """Every row of the table, in order, as (function, its arguments after rng and sweeps)."""
    rows: list[tuple] = [(identical_groups, (noise, seeds)) for noise in NOISES for seeds in (4, 6)]
    rows += [(too_few_seeds, ())] + [(sgd_against_three, (seeds,)) for seeds in (4, 6)]
    rows += [(flat_group, (noise,)) for noise in (PER_EXAMPLE, RUN_LEVEL, FMNIST_LIKE)]
    rows += [
        (five_pp, (noise, label, failures))
        for noise in (PER_EXAMPLE, RUN_LEVEL)
        for label, failures in (
            ("no failed cells", {}),
            ("10% of cells failed", {"fail": 0.1}),
            ("worst sigma with 3 of 6 seeds trained", {"keep_at": {2.5: 3}}),
        )
    ]
    rows += [(one_trained_seed, ()), (unequal_sigma_sets, ())]
    rows += [
        (power, (noise, seeds))
        for noise, seeds in (
            (DIGITS_FITTED, 6),
            (DIGITS_FITTED, 4),
            (DIGITS_FITTED, 8),
            (DIGITS_FITTED, 10),
            (RUN_LEVEL, 6),
        )
    ]
    rows += [(clock_ordering_alike, (seeds,)) for seeds in (4, 6)] + [(clock_ordering_power, ())]
    rows += new_claim_checks()
    rows += shared_test_set_checks()
    rows += three_seed_checks()
    rows += equivalence_checks()
    rows += fmnist_effstep_checks()
    rows += regime_checks()
    rows += preset_power_checks()
    return rows


def _one_row(task: tuple) -> Row:
    index, sweeps, seed, (check, args) = task
    return check(np.random.default_rng([seed, index]), sweeps, *args)


def run_checks(sweeps: int, seed: int = 0, workers: int = 1, rows: set[int] | None = None, log=print) -> list[Row]:
    """Every row (or the ``rows`` numbered, from 1, as printed), each from its own rng seeded by
    ``seed`` and the row's number, so that rows run in ``workers`` processes side by side and any
    one row can be rerun alone, with more sweeps, say."""
    tasks = [(index, sweeps, seed, check) for index, check in enumerate(checks()) if rows is None or index + 1 in rows]
    done: list[Row] = []
    with concurrent.futures.ProcessPoolExecutor(workers) if workers > 1 else contextlib.nullcontext() as pool:
        for task, row in zip(tasks, pool.map(_one_row, tasks) if pool else map(_one_row, tasks)):
            row = dataclasses.replace(row, number=task[0] + 1, sweeps=sweeps)
            done.append(row)
            log(
                f"{task[0] + 1:>2}. {row.check:55s} {row.noise:12s} {row.seeds:>2} seeds  {row.measured:>8s}  "
                f"(target {row.target}) {row.detail}"
            )
    return done


TABLE_HEAD = (
    "Each row is reproduced by `python -m benchmarks.calibration --rows N --sweeps S` with N its number "
    "and S its sweeps: every row has its own seeded draws, whatever "
    "runs beside it, so rows measured at different times and sweep counts make one table."
)
COLUMNS = "| # | check | noise | seeds | sweeps | target | measured | detail |"
SEPARATOR = "|" + "---|" * (COLUMNS.count("|") - 1)


def table_line(r: Row) -> str:
    return f"| {r.number} | {r.check} | {r.noise} | {r.seeds} | {r.sweeps} | {r.target} | {r.measured} | {r.detail} |"


def markdown(rows: list[Row], sweeps: int, seconds: float, workers: int = 1, options: str = "") -> str:
    command = f"python -m benchmarks.calibration --sweeps {sweeps} --workers {workers}{options}"
    lines = [TABLE_HEAD, f"Last measured: `{command}` ({seconds / 60:.1f} min).", "", COLUMNS, SEPARATOR] + [
        table_line(r) for r in rows
    ]
    return "\n".join(lines)


BEGIN, END = "<!-- calibration table: begin -->", "<!-- calibration table: end -->"


def write_docs(table: str, path: Path = ROOT / "docs" / "STATISTICS.md", merge: bool = False) -> None:
    """Replace the table in ``path``; with ``merge``, replace only the rows ``table`` holds (by
    number), keeping the others and the order by number. Where ``path`` has a regime block
    (``REGIME_BEGIN``), the regime's rows of the table are copied into it."""
    text = path.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    if merge:

        def numbered(lines: list[str]) -> dict[int, str]:
            return {
                int(line.split("|")[1]): line
                for line in lines
                if line.startswith("| ") and line.split("|")[1].strip().isdigit()
            }

        new_lines = table.splitlines()
        rows = {**numbered(text[start:stop].splitlines()), **numbered(new_lines)}
        head = [line for line in new_lines if not line.startswith("|")]
        table = "\n".join(head + [COLUMNS, SEPARATOR] + [rows[n] for n in sorted(rows)])
    text = text[:start] + "\n" + table + "\n" + text[stop:]
    if REGIME_BEGIN in text:
        text = _write_regime_rows(text, table)
    path.write_text(text)


REGIME_BEGIN, REGIME_END = "<!-- regime rows: begin -->", "<!-- regime rows: end -->"


def regime_row_numbers() -> list[int]:
    """The numbers (from 1) of the rows that calibrate the regime's checks (``regime_checks``)."""
    regime = {check for check, _ in regime_checks()}
    return [index + 1 for index, (check, _) in enumerate(checks()) if check in regime]


def _write_regime_rows(text: str, table: str) -> str:
    """The regime's rows of ``table`` (the whole table, as written) copied into the regime block of the
    docs, under the table's own columns: the section that argues the checks shows what they measured."""
    wanted = set(regime_row_numbers())
    lines = [
        line
        for line in table.splitlines()
        if line.startswith("| ") and line.split("|")[1].strip().isdigit() and int(line.split("|")[1]) in wanted
    ]
    block = "\n".join([COLUMNS, SEPARATOR] + lines) if lines else ""
    start, stop = text.index(REGIME_BEGIN) + len(REGIME_BEGIN), text.index(REGIME_END)
    return text[:start] + "\n" + block + ("\n" if block else "") + text[stop:]


NOISE_BEGIN, NOISE_END = "<!-- fitted noise: begin -->", "<!-- fitted noise: end -->"


def write_noise_section(path: Path = ROOT / "docs" / "STATISTICS.md") -> None:
    """Refit the noise model (``benchmarks/noise_model.py``) and replace its figures in ``path``."""
    from benchmarks import noise_model

    fitted, cells = noise_model.fit_exports()
    section = noise_model.markdown(fitted, cells)
    print(section)
    text = path.read_text()
    start, stop = text.index(NOISE_BEGIN) + len(NOISE_BEGIN), text.index(NOISE_END)
    path.write_text(text[:start] + "\n" + section + "\n" + text[stop:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=400, help="synthetic sweeps per setting")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="processes running rows side by side")
    parser.add_argument(
        "--rows",
        type=lambda text: {int(n) for n in text.split(",")},
        help="only these rows, numbered from 1 as printed (e.g. 6,23); with --write-docs, "
        "only they are replaced in the table",
    )
    parser.add_argument("--write-docs", action="store_true", help="replace the table in docs/STATISTICS.md")
    parser.add_argument(
        "--fit-noise",
        action="store_true",
        help="refit the noise model to docs/results/*.json.gz and write its figures into docs/STATISTICS.md",
    )
    args = parser.parse_args()
    if args.fit_noise:
        write_noise_section()
        return
    start = time.perf_counter()
    rows = run_checks(args.sweeps, args.seed, args.workers, args.rows)
    options = (f" --seed {args.seed}" if args.seed else "") + (
        f" --rows {','.join(map(str, sorted(args.rows)))}" if args.rows else ""
    )
    table = markdown(rows, args.sweeps, time.perf_counter() - start, args.workers, options)
    print(table)
    if args.write_docs:
        write_docs(table, merge=bool(args.rows))


if __name__ == "__main__":
    main()
