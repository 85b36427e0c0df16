"""Property-based tests (hypothesis): sparsemax lies on the simplex and is the Euclidean projection onto
it; the MBA posterior variance never exceeds any single term's variance."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mnp.model.aggregation import mba_posterior, unimodal_posteriors
from mnp.model.attention import normalise

SETTINGS = settings(max_examples=200, deadline=None)
ULP64 = 8 * np.finfo(np.float64).eps


def score_rows(max_magnitude):
    """(rows, n) float64 scores with magnitudes up to ``max_magnitude`` (ties and equal rows included)."""
    elements = st.floats(-max_magnitude, max_magnitude, allow_nan=False, allow_infinity=False)
    return st.tuples(st.integers(1, 4), st.integers(1, 12)).flatmap(
        lambda shape: arrays(np.float64, shape, elements=elements)
    )


@SETTINGS
@given(z=score_rows(1e30), shift=st.floats(-1e6, 1e6))
def test_sparsemax_output_lies_on_the_simplex(z, shift):
    for x in (torch.tensor(z), torch.tensor(z, dtype=torch.float32), torch.tensor(z + shift, dtype=torch.float32)):
        p = normalise(x, "sparsemax").double()
        assert torch.isfinite(p).all() and (p >= 0).all()
        assert torch.allclose(p.sum(-1), torch.ones(p.shape[0], dtype=torch.float64), atol=1e-5)


@SETTINGS
@given(z=score_rows(10.0))
def test_sparsemax_is_the_closest_point_of_the_simplex(z):
    """Optimality of the projection: p_i = max(z_i − τ, 0) with one threshold τ for the whole row, i.e.
    every kept entry is z_i − τ and every dropped entry has z_i ≤ τ (to float32 precision: normalise
    computes in float32)."""
    p = normalise(torch.tensor(z), "sparsemax").numpy()
    for zi, pi in zip(z, p):
        kept = pi > 0
        tau = (zi[kept] - pi[kept]).mean()
        np.testing.assert_allclose(zi[kept] - pi[kept], tau, atol=1e-5)
        assert (zi[~kept] <= tau + 1e-5).all()


positive = st.floats(1e-6, 1e6, allow_nan=False, allow_infinity=False)


@SETTINGS
@given(shape=st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 6)), data=st.data())
def test_mba_variance_never_exceeds_any_single_term(shape, data):
    """σ²_z = 1 / Σ_m (1/s*_m + 1/q_m) (eq. 8) ≤ every s*_m and every prior q_m, and ≤ each unimodal σ²_m;
    also when modalities are masked, over the terms that remain."""
    m, b, d = shape
    s = torch.tensor(data.draw(arrays(np.float64, (m, b, d), elements=positive)))
    q = torch.tensor(data.draw(arrays(np.float64, (m, 1, d), elements=positive)))
    r, u = torch.randn(m, b, d, dtype=torch.float64), torch.randn(m, 1, d, dtype=torch.float64)
    _, var = mba_posterior(r, s, u, q)
    assert (var > 0).all()
    terms = torch.cat([s, q.expand_as(s)])  # (2M, B, d): every single term's variance
    assert (var <= terms.min(0).values * (1 + ULP64)).all()
    _, var_m = unimodal_posteriors(r, s, u, q)
    assert (var <= var_m * (1 + ULP64)).all()
    weights = torch.tensor(data.draw(arrays(np.float64, (b, m), elements=st.sampled_from([0.0, 1.0]))))
    weights[:, 0] = 1.0  # at least one modality per target
    _, var_w = mba_posterior(r, s, u, q, weights)
    kept = weights.t()[..., None].bool().expand_as(s)
    masked_min = torch.where(kept, torch.minimum(s, q.expand_as(s)), torch.tensor(float("inf"))).min(0).values
    assert (var_w <= masked_min * (1 + ULP64)).all()
    assert (var <= var_w * (1 + ULP64)).all()  # dropping modalities never sharpens the posterior
