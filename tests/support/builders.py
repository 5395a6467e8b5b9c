"""Hand-made sweep results for the report and claims tests: one place that builds a ``CellRecord``,
so every test's cells are made the same way, and the sweeps several test files share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from initmem_core.config import RunConfig
from initmem_core.tracking.records import CellRecord


def record(
    config: Mapping[str, Any] | RunConfig, acc: float | None = None, /, fit: bool | None = True, **fields: Any
) -> CellRecord:
    """One cell: ``config`` (a ``RunConfig`` or a mapping), ``acc`` its ``best_val_test_acc`` (a
    fraction), listed first among ``metrics=``; any other ``CellRecord`` field as a keyword. Its
    selected predictor fit its training set (the logged ``fit`` 1) unless ``fit`` says otherwise
    (``None``: no flag logged, as in records from before runs logged it)."""
    metrics = {} if acc is None else {"best_val_test_acc": acc}
    metrics |= {} if fit is None else {"fit": float(fit)}
    metrics.update(fields.pop("metrics", {}))
    return CellRecord(config, metrics=metrics, **fields)


def cell(opt: str, sigma: float, seed: int, acc: float | None = None, /, **fields: Any) -> CellRecord:
    """One cell of ``opt`` at ``sigma`` and ``seed``, every other setting the default."""
    return record(RunConfig(opt=opt, sigma=sigma, seed=seed), acc, **fields)


def clocks(sgd: float, l2: float, adapt: float) -> dict[str, float]:
    """The three forgetting clocks as a cell's metrics."""
    return {"clock_sgd": sgd, "clock_l2": l2, "clock_adapt": adapt}


#: The two sigmas of the hand-made sweeps.
SIGMAS = (0.1, 2.5)
# group -> (fixed config, test accuracy at each sigma, final ||W|| at each sigma, clocks)
REMEMBERING_WORLD = {
    "sgd": ({"opt": "sgd", "batch_size": 32}, (0.90, 0.60), (1.0, 25.0), (0.01, 0.0, 5.0)),
    "sgd-big-batch": ({"opt": "sgd", "batch_size": 128}, (0.90, 0.50), (1.0, 25.0), (0.002, 0.0, 1.2)),
    "sgd-small-batch": ({"opt": "sgd", "batch_size": 8}, (0.90, 0.70), (1.0, 25.0), (0.05, 0.0, 20.0)),
    "sgd-l2": ({"opt": "sgd", "batch_size": 32, "l2": 0.01}, (0.90, 0.88), (3.0, 4.0), (0.01, 0.05, 5.0)),
    "adam": ({"opt": "adam", "batch_size": 32, "lr": 0.001}, (0.91, 0.89), (30.0, 33.0), (0.0001, 0.0, 50.0)),
    "muon": ({"opt": "muon", "batch_size": 32, "lr": 0.02}, (0.92, 0.90), (20.0, 21.0), (0.01, 0.0, 100.0)),
}


#: Seed-to-seed wobble of accuracy (fractions) at each sigma; each column averages to 0.0005.
WORLD_WOBBLE = {0.1: (0.0, 0.004, -0.004, 0.002), 2.5: (0.002, -0.004, 0.004, 0.0)}


def records(world, seeds=4, **extra):
    """A sweep of ``world`` (group -> fixed config, accuracies, norms, clocks at ``SIGMAS``), ``seeds`` a cell."""
    out = []
    for config, accs, norms, (t_sgd, t_l2, t_adapt) in world.values():
        for sigma, acc, norm in zip(SIGMAS, accs, norms):
            for seed in range(seeds):
                acc_seed = acc + WORLD_WOBBLE[sigma][seed % 4] + 0.001 * (seed // 4)
                out.append(
                    record(
                        {**config, **extra, "sigma": sigma, "seed": seed},
                        acc_seed,
                        metrics={
                            "final_test_acc": acc_seed,
                            "tau_interp": 5,
                            "repair_gap": 0.0,
                            "weight_norm": norm,
                            "weight_norm_ratio": norm / sigma,
                            **clocks(t_sgd, t_l2, t_adapt),
                        },
                    )
                )
    return out


#: Seed-to-seed wobble of accuracy (fractions) for ``two_optimizers``.
WOBBLE = (0.0, 0.004, -0.004, 0.002, 0.001, -0.003)


def two_optimizers(seeds: int = 6, sgd=(0.90, 0.60), adam=(0.91, 0.90), **extra):
    """A user's first sweep: SGD against Adam, two sigmas; SGD remembers, Adam forgets."""
    out = []
    for config, accs, norms, clock in (
        ({"opt": "sgd"}, sgd, (1.0, 25.0), clocks(0.01, 0.0, 5.0)),
        ({"opt": "adam", "lr": 0.001}, adam, (30.0, 33.0), clocks(0.0001, 0.0, 50.0)),
    ):
        for sigma, acc, norm in zip(SIGMAS, accs, norms):
            for seed in range(seeds):
                value = acc + WOBBLE[seed % len(WOBBLE)]
                metrics = {"weight_norm": norm, "weight_norm_ratio": norm / sigma, "tau_interp": 5, **clock}
                out.append(record({**config, **extra, "sigma": sigma, "seed": seed}, value, metrics=metrics))
    return out


def claim(name: str):
    """The registered claim ``name`` as a function of records or a sweep view, evaluated as a report
    evaluates it (its registration on the view); a claim that raised fails the test with its error."""
    from initmem_core.report.claim_groups import Sweep, read_sweep
    from initmem_core.report.claims import claim_named, evaluate_claim

    def evaluate(sweep_or_records):
        sweep = sweep_or_records if isinstance(sweep_or_records, Sweep) else read_sweep(sweep_or_records)
        found = evaluate_claim(claim_named(name), sweep)
        assert not found.error, found.error
        return found

    return evaluate


def findings(cells) -> list:
    """Every registered claim's finding on the sweep of ``cells`` (the paper's, unless a test registers more)."""
    from initmem_core.report.claim_groups import read_sweep
    from initmem_core.report.claims import evaluate_claims

    return evaluate_claims(read_sweep(cells))
