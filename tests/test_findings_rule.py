"""The decision rule of the findings: reproduced only when the interval of the difference excludes
zero in the claimed direction; noise gives 'not resolved at this scale'."""

from __future__ import annotations

import math

import pytest

from initmem_core.report.claim_groups import baseline_sgd
from initmem_core.report.verdicts import CONTRADICTED, NOT_RESOLVED, REPRODUCED, bonferroni_level, decide
from initmem_plugins.claims.paper import (
    evaluate_findings,
    norm_forgetting,
    norms_coupled_for_sgd_not_adaptive,
    read_sweep,
    spread_orders_by_clock_within_family,
)
from tests.builders import clocks, record


def test_decide_by_hand():
    assert decide([(0.5, 3.0), (0.1, 1.0)]) == REPRODUCED
    assert decide([(0.5, 3.0), (-1.0, 1.0)]) == NOT_RESOLVED
    assert decide([(0.5, 3.0), (-2.0, -0.1)]) == CONTRADICTED
    assert decide([(math.nan, math.nan)]) == NOT_RESOLVED
    assert decide([]) == NOT_RESOLVED
    # Contradicted by one of k comparisons only at the Bonferroni level: the wider interval decides.
    assert decide([(0.5, 3.0), (-2.0, -0.1)], against=[(0.3, 3.2), (-2.3, 0.2)]) == NOT_RESOLVED
    assert bonferroni_level(3) == pytest.approx(1 - 0.05 / 3) and bonferroni_level(1) == pytest.approx(0.95)


def cells(opt, accs_by_seed, norms=(1.0, 25.0), sigmas=(0.1, 2.5), **config):
    out = []
    for seed, accs in enumerate(accs_by_seed):
        for sigma, acc, norm in zip(sigmas, accs, norms):
            out.append(
                record(
                    {"opt": opt, "sigma": sigma, "seed": seed, **config},
                    acc,
                    metrics={
                        "weight_norm": norm,
                        "weight_norm_ratio": norm / sigma,
                        **clocks(0.01, 0.0, 1.0 if opt == "sgd" else 50.0),
                    },
                )
            )
    return out


def test_a_difference_inside_seed_noise_is_not_resolved():
    # SGD's mean spread (10 pp) is above Adam's (2 pp) but the seeds disagree on the order.
    records = cells("sgd", [(0.90, 0.70), (0.90, 0.90), (0.90, 0.74), (0.90, 0.86)]) + cells(
        "adam", [(0.90, 0.86), (0.90, 0.90), (0.90, 0.88), (0.90, 0.88)], lr=1e-3
    )
    first = evaluate_findings(records)[0]
    assert first.verdict == NOT_RESOLVED and first.reproduced is None
    assert "sgd b=64 10.00 pp (debiased +10.00" in first.measured and "adam 2.00 pp" in first.measured


def test_norm_claim_fails_when_adams_norm_ratio_stays_at_its_initial_value():
    # Adam barely moves its weights: ||W||/||W0|| ~ 1.005 at both sigmas, so the final ratio across
    # sigma is the initial one, exactly what the old "final ratio smaller than SGD's" check passed.
    sgd = cells("sgd", [(0.9, 0.6), (0.9, 0.62), (0.9, 0.61)], norms=(2.0, 26.0))
    adam = cells("adam", [(0.9, 0.88), (0.9, 0.89), (0.9, 0.88)], norms=(0.1005, 2.5125), lr=1e-3)
    sweep = read_sweep(sgd + adam)
    base = baseline_sgd(sweep.groups)
    moved = norm_forgetting(next(g for g in sweep.groups if g.config.opt == "adam"))
    assert moved == pytest.approx({0: 0.0, 1: 0.0, 2: 0.0}, abs=1e-9)  # log(25)/log(25)
    expected_sgd = 1 - math.log(13) / math.log(25)
    assert base is not None and norm_forgetting(base) == pytest.approx(dict.fromkeys(range(3), expected_sgd))
    finding = norms_coupled_for_sgd_not_adaptive(sweep)
    assert finding.verdict == CONTRADICTED  # Adam's norms did not converge at all
    assert [q.verdict for q in finding.quantities] == [REPRODUCED, CONTRADICTED]  # one line per optimizer
    assert "(contradicted)" in finding.measured


def test_spearman_within_a_family_handles_tied_spreads():
    from scipy import stats

    records = (
        cells("sgd", [(0.9, 0.6)] * 3, batch_size=8)
        + cells("sgd", [(0.9, 0.6)] * 3, batch_size=32)
        + cells("sgd", [(0.9, 0.88)] * 3, batch_size=128)
    )
    for cell in records:  # T_SGD falls with the batch
        cell.metrics["clock_sgd"] = 0.32 / cell.config.batch_size
    finding = spread_orders_by_clock_within_family(read_sweep(records))
    # clocks 0.04, 0.01, 0.0025; spreads 30, 30, 2: average ranks; here the larger clock has the larger spread
    rho = stats.spearmanr([0.04, 0.01, 0.0025], [30.0, 30.0, 2.0]).statistic
    assert f"{-rho:+.2f}" in finding.measured and rho == pytest.approx(0.866, abs=1e-3)
    assert finding.quantities[0].estimate == pytest.approx(-rho)
