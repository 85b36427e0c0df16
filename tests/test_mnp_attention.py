"""Attention (eqs. 1, 9): sparsemax against a brute-force simplex projection, RBF scores against
their definition, exact zeros for far-away context points, batched = per-modality scores."""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from mnp.model.attention import DotSimilarity, RBFSimilarity, from_positive, normalise, sq_dist, to_positive


def project_onto_simplex(z: np.ndarray) -> np.ndarray:
    """argmin_p ‖p − z‖² over the simplex by brute force over every support set S.

    On the face with support S the minimiser is p_S = z_S − (Σ z_S − 1)/|S|; the projection is the
    closest of the feasible (p ≥ 0) face minimisers.
    """
    best, best_d = None, np.inf
    for mask in itertools.product([False, True], repeat=len(z)):
        s = np.array(mask)
        if not s.any():
            continue
        p = np.zeros_like(z)
        p[s] = z[s] - (z[s].sum() - 1) / s.sum()
        if (p >= 0).all() and ((p - z) ** 2).sum() < best_d:
            best, best_d = p, ((p - z) ** 2).sum()
    return best


@pytest.mark.parametrize("seed", range(5))
def test_sparsemax_is_the_euclidean_projection_onto_the_simplex(seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(scale=rng.uniform(0.1, 3.0), size=(4, 7))
    got = normalise(torch.tensor(z, dtype=torch.float32), "sparsemax").double().numpy()
    want = np.stack([project_onto_simplex(row) for row in z])
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.allclose(got.sum(-1), 1, atol=1e-6) and (got >= 0).all()


def test_sparsemax_runs_in_float32_under_autocast():
    scores = torch.randn(3, 5).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = normalise(scores, "sparsemax")
    assert out.dtype == torch.float32


def test_softmax_normaliser():
    z = torch.randn(2, 3, 6)
    assert torch.allclose(normalise(z, "softmax"), torch.softmax(z, -1))


def test_sq_dist_matches_scipy_and_is_never_negative():
    a, b = torch.randn(20, 9, dtype=torch.float64), torch.randn(30, 9, dtype=torch.float64)
    np.testing.assert_allclose(sq_dist(a, b).numpy(), cdist(a.numpy(), b.numpy(), "sqeuclidean"), atol=1e-10)
    x = torch.randn(50, 16) * 1e3
    assert (sq_dist(x, x) >= 0).all()  # cancellation on the diagonal is clamped


@pytest.mark.parametrize("form", ["l", "l2"])
@pytest.mark.parametrize("amplitude", [False, True])
def test_rbf_scores_follow_the_kernel_definition(form, amplitude):
    torch.manual_seed(0)
    sim = RBFSimilarity([4, 3], lengthscale_init=2.0, form=form, amplitude=amplitude)
    with torch.no_grad():
        sim.raw_lengthscale[0].add_(torch.randn(4) * 0.3)  # per-dimension lengthscales
        if amplitude:
            sim.raw_amplitude.copy_(torch.tensor([from_positive(0.5, "softplus"), from_positive(2.0, "softplus")]))
    t = [torch.randn(5, 4), torch.randn(5, 3)]
    c = [torch.randn(6, 4), torch.randn(6, 3)]
    g = sim(t, c)
    assert g.shape == (2, 5, 6)
    for m, amp in enumerate([0.5, 2.0] if amplitude else [1.0, 1.0]):
        l = to_positive(sim.raw_lengthscale[m], "softplus").detach()
        lam = l**2 if form == "l2" else l
        for i in range(5):
            for j in range(6):
                want = amp * math.exp(-0.5 * (((t[m][i] - c[m][j]) / lam) ** 2).sum().item())
                assert g[m, i, j].item() == pytest.approx(want, rel=1e-4, abs=1e-6)


def test_batched_scores_equal_per_modality_scores():
    torch.manual_seed(1)
    sim = RBFSimilarity([8, 8, 8], lengthscale_init=3.0, form="l")
    t, c = [torch.randn(7, 8) for _ in range(3)], [torch.randn(9, 8) for _ in range(3)]
    batched = sim(t, c)
    for m in range(3):
        alone = RBFSimilarity([8], lengthscale_init=3.0, form="l")
        alone.raw_lengthscale[0].data.copy_(sim.raw_lengthscale[m].data)
        assert torch.allclose(batched[m], alone([t[m]], [c[m]])[0], atol=1e-6)


def test_rbf_sparsemax_gives_exact_zeros_to_far_context_points():
    sim = RBFSimilarity([2], lengthscale_init=1.0, form="l")
    near = torch.tensor([[0.0, 0.0], [0.3, -0.2], [-0.1, 0.4]])
    far = torch.tensor([[50.0, 50.0], [-40.0, 30.0]])
    attn = normalise(sim([torch.tensor([[0.1, 0.1]])], [torch.cat([near, far])]), "sparsemax")[0, 0]
    assert (attn[3:] == 0).all() and attn[:3].sum().item() == pytest.approx(1.0)
    soft = normalise(sim([torch.tensor([[0.1, 0.1]])], [torch.cat([near, far])]), "softmax")[0, 0]
    assert (soft[3:] > 0).all()  # softmax never gives zeros (the paper's motivation for sparsemax)
    # an OOD target far from every context point: all scores are 0, sparsemax spreads uniformly
    ood = normalise(sim([torch.tensor([[100.0, -100.0]])], [near]), "sparsemax")[0, 0]
    assert torch.allclose(ood, torch.full((3,), 1 / 3))


def test_dot_similarity_is_scaled_dot_product():
    t, c = [torch.randn(4, 16)], [torch.randn(5, 16)]
    assert torch.allclose(DotSimilarity([16])(t, c)[0], t[0] @ c[0].T / 4.0, atol=1e-6)
    assert DotSimilarity([16, 3]).penalty("norm").tolist() == [0.0, 0.0]


@pytest.mark.parametrize("param", ["softplus", "exp"])
def test_lengthscale_initialisation_and_penalties(param):
    sim = RBFSimilarity([3, 5], lengthscale_init=10.0, param=param)
    for l, d in zip(sim.lengthscales(), [3, 5]):
        assert torch.allclose(l, torch.full((d,), 10.0), atol=1e-4)
    assert torch.allclose(sim.penalty("norm"), torch.tensor([10 * math.sqrt(3), 10 * math.sqrt(5)]), atol=1e-3)
    assert torch.allclose(sim.penalty("half_sq"), torch.tensor([0.5 * 300, 0.5 * 500]), atol=1e-2)


def test_unknown_switch_names_fail_clearly():
    with pytest.raises(ValueError, match="lengthscale_form"):
        RBFSimilarity([2], form="l3")
