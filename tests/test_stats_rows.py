"""Holm–Bonferroni and the two-level (seeds, test rows) bootstrap of mnp.tools.report.stats."""

from __future__ import annotations

import numpy as np
import pytest

from mnp.tools.report.stats import bootstrap_means, holm, row_bootstrap


def holm_rejects(p, alpha):
    """The step-down procedure itself: reject the smallest p-values while p_(j) < α / (m − j + 1)."""
    order, rejected = np.argsort(p), set()
    for j, i in enumerate(order):
        if p[i] >= alpha / (len(p) - j):
            break
        rejected.add(int(i))
    return rejected


def test_holm_adjusted_p_values_match_a_worked_example_and_leave_untested_claims_out():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.01, None, float("nan"), 0.04]) == [pytest.approx(0.02), None, None, pytest.approx(0.04)]
    assert holm([]) == []


def test_holm_rejects_exactly_what_the_step_down_procedure_rejects():
    rng = np.random.default_rng(0)
    for _ in range(300):
        p = list(rng.uniform(0, 0.2, size=rng.integers(1, 12)) ** rng.uniform(1, 3))
        adjusted = holm(p)
        for alpha in (0.01, 0.05, 0.1):
            assert {i for i, q in enumerate(adjusted) if q < alpha} == holm_rejects(np.array(p), alpha)


def test_the_bootstrap_spread_holds_the_test_rows_noise_when_seeds_agree():
    rng = np.random.default_rng(1)
    row = (rng.random(120) < 0.9).astype(float) - (rng.random(120) < 0.85).astype(float)
    d = np.tile(row, (10, 1))  # every seed the same rows: a seed t-test would call any nonzero mean exact
    means = bootstrap_means(d, draws=4000)
    assert means.std() == pytest.approx(row.std() / np.sqrt(120), rel=0.1)


def test_the_bootstrap_test_of_equal_models_consistent_gaps_and_small_gaps():
    rng = np.random.default_rng(2)
    a = (rng.random((10, 120)) < 0.9).astype(float)
    assert row_bootstrap(a, a).p_value == 1.0
    assert row_bootstrap(a, a - 1, draws=2000).p_value == pytest.approx(1 / 2000)
    b = a.copy()
    b[:, :3] = 1 - b[:, :3]  # a gap of 3 test rows on every seed: exact for a seed t-test, not for the rows
    assert row_bootstrap(a, b).p_value > 0.05
    assert row_bootstrap(a[:1], b[:1]).p_value is None
    with pytest.raises(ValueError, match="one shape"):
        row_bootstrap(a, b[:, :5])
