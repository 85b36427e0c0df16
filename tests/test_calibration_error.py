"""Calibration measures that mean something at 120 test rows: the debiased L2 calibration error against Kumar et al.'s
own package, and the calibrated-model floor of the ECE against its closed form."""

from __future__ import annotations

import math

import calibration as kumar  # uncertainty-calibration, the reference implementation of Kumar et al. (2019)
import numpy as np
import pytest
import torch
from scipy import stats

from mnp.eval.metrics import debiased_ce, ece, ece_floor, selective_metrics


def random_probs(rng, n, k, scale=2.0, decimals=None):
    logits = rng.normal(size=(n, k)) * scale
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return np.round(p, decimals) / np.round(p, decimals).sum(1, keepdims=True) if decimals else p


@pytest.mark.parametrize("n,k,decimals", [(120, 10, None), (136, 68, None), (900, 15, None), (200, 3, 1), (9, 4, None)])
def test_the_debiased_calibration_error_equals_kumar_et_al_reference(n, k, decimals):
    rng = np.random.default_rng(n + k)
    p = random_probs(rng, n, k, decimals=decimals)  # decimals: tied confidences across the bin cuts
    for labels in (rng.integers(0, k, n), p.argmax(1)):  # a miscalibrated and an over-accurate labelling
        # their equal-mass estimator (get_calibration_error switches to other bins for few distinct values)
        ref = kumar.lower_bound_scaling_ce(p, labels, p=2, debias=True, num_bins=15, mode="top-label")
        assert debiased_ce(torch.tensor(p), torch.tensor(labels)) == pytest.approx(ref, abs=1e-12)


def test_the_debiased_error_of_a_calibrated_model_is_near_zero_where_binned_ece_is_not():
    rng = np.random.default_rng(0)
    p = random_probs(rng, 120, 10, scale=1.0)
    draws = [np.array([rng.choice(10, p=r) for r in p]) for _ in range(40)]  # labels as the model says
    plain = np.mean([ece(torch.tensor(p), torch.tensor(y)) for y in draws])
    debiased = np.mean([debiased_ce(torch.tensor(p), torch.tensor(y)) for y in draws])
    assert plain > 0.05 and debiased < 0.65 * plain  # the true error is 0; the root keeps some bias


def test_the_ece_floor_equals_the_expected_ece_of_a_calibrated_model_in_closed_form():
    n, c = 50, 0.7  # every row's top confidence 0.7: one bin, ECE = |c - hits / n| with hits ~ Binomial(n, c)
    p = torch.tensor([[c, 1 - c]] * n, dtype=torch.float64)
    exact = sum(stats.binom.pmf(h, n, c) * abs(c - h / n) for h in range(n + 1))
    draws = 20000
    sd = math.sqrt(sum(stats.binom.pmf(h, n, c) * (abs(c - h / n) - exact) ** 2 for h in range(n + 1)) / draws)
    assert ece_floor(p, draws=draws) == pytest.approx(exact, abs=4 * sd)


def test_the_ece_floor_is_seeded_shrinks_with_rows_and_is_nan_for_nonfinite_rows():
    rng = np.random.default_rng(1)
    p120, p12000 = (torch.tensor(random_probs(rng, n, 10)) for n in (120, 12000))
    assert ece_floor(p120) == ece_floor(p120) and ece_floor(p120, seed=1) != ece_floor(p120)
    assert ece_floor(p12000) < ece_floor(p120) / 3
    bad = p120.clone()
    bad[3, 0] = float("nan")
    assert math.isnan(ece_floor(bad)) and math.isnan(debiased_ce(bad, torch.zeros(120, dtype=torch.long)))


def test_the_test_split_reports_both_beside_ece():
    rng = np.random.default_rng(2)
    p = torch.tensor(random_probs(rng, 120, 10), dtype=torch.float32)
    y = torch.tensor(rng.integers(0, 10, 120))
    out = selective_metrics(p, y, -p.max(-1).values)
    assert out["ce_debiased"] == pytest.approx(debiased_ce(p, y)) and out["ece_floor"] == pytest.approx(ece_floor(p))
