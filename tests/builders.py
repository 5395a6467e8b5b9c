"""Hand-made sweep results for the report and findings tests: one place that builds a
``CellRecord``, so every test's cells are made the same way."""

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
