"""MBA (eq. 8) against a brute-force product of Gaussian densities; the ablations and the modality mask."""

import math
import time
from itertools import combinations

import numpy as np
import pytest
import torch
from mnp_utils import flat_mnp

from mnp.model.aggregation import (
    MBA,
    TABLE_VIEWS,
    ConcatAggregation,
    MeanAggregation,
    mba_posterior,
    modality_draws,
    random_modality_mask,
    unimodal_posteriors,
)

CPU = torch.device("cpu")


def grid_posterior(means: np.ndarray, variances: np.ndarray) -> tuple[float, float]:
    """Mean and variance of the normalised product of 1-D Gaussian densities, on a fine grid."""
    lo, hi = (means - 12 * np.sqrt(variances)).min(), (means + 12 * np.sqrt(variances)).max()
    z = np.linspace(lo, hi, 400_001)
    log_p = sum(-0.5 * (z - m) ** 2 / v - 0.5 * np.log(2 * np.pi * v) for m, v in zip(means, variances))
    p = np.exp(log_p - log_p.max())
    p /= np.trapezoid(p, z)
    mean = np.trapezoid(z * p, z)
    return mean, np.trapezoid((z - mean) ** 2 * p, z)


def random_terms(seed: int, m: int = 3, b: int = 2, d: int = 3):
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(m, b, d, generator=g, dtype=torch.float64) * 2
    s = 0.05 + torch.rand(m, b, d, generator=g, dtype=torch.float64) * 3
    u = torch.randn(m, 1, d, generator=g, dtype=torch.float64)
    q = 0.05 + torch.rand(m, 1, d, generator=g, dtype=torch.float64) * 3
    return r, s, u, q


@pytest.mark.parametrize("seed", range(3))
def test_mba_equals_the_normalised_product_of_gaussians(seed):
    r, s, u, q = random_terms(seed)
    mu, var = mba_posterior(r, s, u, q)
    for i in range(r.shape[1]):
        for k in range(r.shape[2]):
            # N(r*_m | z, s*_m) and the prior factors N(z | u_m, q_m), as densities in z
            means = np.concatenate([r[:, i, k].numpy(), u[:, 0, k].numpy()])
            variances = np.concatenate([s[:, i, k].numpy(), q[:, 0, k].numpy()])
            gm, gv = grid_posterior(means, variances)
            assert mu[i, k].item() == pytest.approx(gm, abs=1e-6)
            assert var[i, k].item() == pytest.approx(gv, rel=1e-5)


def test_unimodal_posterior_is_mba_with_one_modality():
    r, s, u, q = random_terms(7, m=4)
    mu_m, var_m = unimodal_posteriors(r, s, u, q)
    for m in range(4):
        mu, var = mba_posterior(r[m : m + 1], s[m : m + 1], u[m : m + 1], q[m : m + 1])
        assert torch.allclose(mu, mu_m[m]) and torch.allclose(var, var_m[m])
        gm, gv = grid_posterior(
            np.array([r[m, 0, 0].item(), u[m, 0, 0].item()]), np.array([s[m, 0, 0].item(), q[m, 0, 0].item()])
        )
        assert mu_m[m, 0, 0].item() == pytest.approx(gm, abs=1e-6)
        assert var_m[m, 0, 0].item() == pytest.approx(gv, rel=1e-5)


@pytest.mark.parametrize("seed", range(10))
def test_posterior_variance_never_exceeds_any_single_term(seed):
    r, s, u, q = random_terms(seed, m=5, b=8, d=16)
    _, var = mba_posterior(r, s, u, q)
    smallest = torch.minimum(s.min(0).values, q.min(0).values.expand_as(s[0]))
    assert (var <= smallest + 1e-12).all()
    _, var_m = unimodal_posteriors(r, s, u, q)
    assert (var <= var_m + 1e-12).all()  # adding modalities only sharpens the posterior


def test_modality_weights_drop_modalities():
    r, s, u, q = random_terms(3, m=3, b=4)
    w = torch.tensor([[1, 1, 1], [1, 0, 1], [0, 1, 1], [1, 1, 0]], dtype=torch.float64)
    mu, var = mba_posterior(r, s, u, q, w)
    for i in range(4):
        keep = w[i].bool()
        mu_i, var_i = mba_posterior(r[keep][:, i : i + 1], s[keep][:, i : i + 1], u[keep], q[keep])
        assert torch.allclose(mu[i], mu_i[0]) and torch.allclose(var[i], var_i[0])


def test_random_modality_mask_draws_subsets_of_at_least_two_per_call():
    torch.manual_seed(0)
    masks = random_modality_mask(4000, 4, torch.device("cpu"))
    assert masks.shape == (4000, 4) and (masks.sum(1) >= 2).all()
    assert len({tuple(row.tolist()) for row in masks}) == 11  # C(4,2) + C(4,3) + C(4,4)
    assert not torch.equal(masks[:50], random_modality_mask(50, 4, torch.device("cpu")))  # redrawn, not frozen
    assert (random_modality_mask(10, 2, torch.device("cpu")) == 1).all()
    assert (random_modality_mask(10, 1, torch.device("cpu")) == 1).all()


@pytest.mark.parametrize("m", range(1, TABLE_VIEWS + 1))
def test_up_to_twelve_views_the_masks_are_drawn_from_the_table_as_before(m):
    """The same draws as before for a fixed seed (so the same training, and the CUDA-graph path keeps its
    table buffer): a row of the table of every subset of >= 2 views, in order of size, then lexicographic."""
    subsets = [c for r in range(2, m + 1) for c in combinations(range(m), r)] or [tuple(range(m))]
    table = torch.tensor([[float(v in c) for v in range(m)] for c in subsets])
    torch.manual_seed(3)
    before = table[torch.randint(len(table), (500,))]
    model = flat_mnp(3, [2] * m, d_e=8, memory_size=6, modality_mask=True)
    assert torch.equal(model._modality_subsets, table)
    for draws in (None, model._modality_subsets):
        torch.manual_seed(3)
        assert torch.equal(random_modality_mask(500, m, CPU, draws), before)


@pytest.mark.parametrize("m", [TABLE_VIEWS + 1, 40, 1000])
def test_many_views_draw_the_same_distribution_without_the_table(m):
    """Beyond 12 views the 2^M-row table is never built (40 views: 1.1e12 rows); a size k >= 2 is drawn with
    probability C(M, k) / (2^M - M - 1), then k views by a random permutation: each subset of >= 2 views as
    likely as with the table."""
    t0 = time.perf_counter()
    assert modality_draws(m).shape == (m + 1,) and time.perf_counter() - t0 < 1
    torch.manual_seed(0)
    n = 200_000 if m < 1000 else 2_000
    masks = random_modality_mask(n, m, CPU)
    sizes = masks.sum(1).long()
    assert masks.shape == (n, m) and ((masks == 0) | (masks == 1)).all() and (sizes >= 2).all()
    if m < 1000:
        expected = torch.tensor([math.comb(m, k) / (2**m - m - 1) if k >= 2 else 0.0 for k in range(m + 1)])
        assert (torch.bincount(sizes, minlength=m + 1) / n - expected).abs().max() < 0.005
        assert (masks.mean(0) - 0.5).abs().max() < 0.01  # every view equally likely
        pair = (masks[:, 0] * masks[:, 1]).mean()  # two given views together: 1/4 (+ the excluded small sets)
        assert abs(pair - 0.25) < 0.005
    torch.manual_seed(0)
    assert torch.equal(random_modality_mask(n, m, CPU, modality_draws(m)), masks)  # a fixed seed, the same masks


def test_mean_and_concat_ablations():
    r, s, u, q = [t.float() for t in random_terms(1, m=3, b=5, d=8)]
    mu, var = MeanAggregation()(r, s, u, q)
    assert var is None and torch.allclose(mu, r.mean(0))
    cat = ConcatAggregation(3, 8)
    mu, var = cat(r, s, u, q)
    assert var is None and mu.shape == (5, 8)
    manual = cat.fc2(torch.nn.functional.leaky_relu(cat.fc1(torch.cat([r[0], r[1], r[2]], -1)), 0.3))
    assert torch.allclose(mu, manual)
    for agg in (MeanAggregation(), cat):
        mu_m, var_m = agg.unimodal(r, s, u, q)
        assert var_m is None and torch.equal(mu_m, r)
    mu, var = MBA()(r, s, u, q)
    assert mu.shape == (5, 8) and (var > 0).all()
