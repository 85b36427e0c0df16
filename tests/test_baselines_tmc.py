"""TMC: Dempster's rule of combination and the evidential loss."""

import itertools

import pytest
import torch
from torch.distributions import Dirichlet, kl_divergence

from baselines.tmc import TMC, dempster_combine, dempster_combine_all, evidential_loss, kl_to_uniform_dirichlet, opinion


def test_dempster_two_views_by_hand():
    # K = 2. View 1: e = (2, 0) -> α = (3, 1), S = 4, b = (1/2, 0), u = 1/2.
    #        View 2: e = (1, 1) -> α = (2, 2), S = 4, b = (1/4, 1/4), u = 1/2.
    # Conflict C = b¹_1 b²_2 + b¹_2 b²_1 = 1/2·1/4 + 0 = 1/8, so 1 − C = 7/8.
    # b_1 = (b¹_1 b²_1 + b¹_1 u² + b²_1 u¹) / (7/8) = (1/8 + 1/4 + 1/8) · 8/7 = 4/7
    # b_2 = (0 + 0 + 1/4 · 1/2) · 8/7 = 1/7,   u = (1/2 · 1/2) · 8/7 = 2/7   (4/7 + 1/7 + 2/7 = 1)
    # S = K/u = 7, e = b·S = (4, 1), α = (5, 2).
    fused = dempster_combine(torch.tensor([[3.0, 1.0]]), torch.tensor([[2.0, 2.0]]))
    torch.testing.assert_close(fused, torch.tensor([[5.0, 2.0]]))
    b, u = opinion(fused)
    torch.testing.assert_close(b, torch.tensor([[4 / 7, 1 / 7]]))
    torch.testing.assert_close(u, torch.tensor([[2 / 7]]))


def test_dempster_is_order_independent_over_views():
    g = torch.Generator().manual_seed(0)
    alphas = [torch.rand(5, 4, generator=g) * 6 + 1 for _ in range(3)]
    ref = dempster_combine_all(alphas)
    for perm in itertools.permutations(range(3)):
        torch.testing.assert_close(dempster_combine_all([alphas[i] for i in perm]), ref)
    # fusing with a vacuous opinion (no evidence, u = 1) changes nothing
    torch.testing.assert_close(dempster_combine(alphas[0], torch.ones(5, 4)), alphas[0])


def test_evidential_loss_terms():
    alpha = torch.tensor([[4.0, 2.0, 1.5], [1.2, 7.0, 3.0]], dtype=torch.float64)
    torch.testing.assert_close(
        kl_to_uniform_dirichlet(alpha), kl_divergence(Dirichlet(alpha), Dirichlet(torch.ones_like(alpha)))
    )
    # the digamma term is E_{p ~ Dir(α)}[−log p_y]: compare with Monte Carlo
    y = torch.tensor([0, 1])
    onehot = torch.nn.functional.one_hot(y, 3).double()
    fit = evidential_loss(alpha, onehot, annealing=0.0)
    p = Dirichlet(alpha).sample(torch.Size([200_000]))
    mc = -(p.gather(-1, y.expand(len(p), 2)[..., None]).squeeze(-1)).log().mean(0)
    torch.testing.assert_close(fit, mc, rtol=1e-2, atol=0)
    # the KL term only sees the misleading evidence: α̃ = y + (1 − y) α
    alpha_tilde = onehot + (1 - onehot) * alpha
    torch.testing.assert_close(evidential_loss(alpha, onehot, 0.5) - fit, 0.5 * kl_to_uniform_dirichlet(alpha_tilde))


def test_tmc_predicts_fused_opinion():
    torch.manual_seed(0)
    model = TMC(3, [4, 2, 5])
    views = [torch.randn(6, d) for d in (4, 2, 5)]
    probs, unc = model.predict(views)
    fused = dempster_combine_all(list(model.view_alphas(views)))
    assert probs.shape == (1, 6, 3)
    torch.testing.assert_close(probs[0], fused / fused.sum(-1, keepdim=True))
    torch.testing.assert_close(unc, 3 / fused.sum(-1))
    # each view's evidence depends on its own view only (zero-padded batched layer)
    changed = list(views)
    changed[1] = changed[1] + 1.0
    a0, a1 = model.view_alphas(views), model.view_alphas(changed)
    torch.testing.assert_close(a0[[0, 2]], a1[[0, 2]])
    assert not torch.allclose(a0[1], a1[1])


def test_tmc_softmax_evidence_reading_keeps_the_argmax_and_the_uncertainty():
    torch.manual_seed(0)
    views = [torch.randn(6, d) for d in (4, 2, 5)]
    model = TMC(3, [4, 2, 5], probability="softmax_evidence")
    probs, unc = model.predict(views)
    fused = dempster_combine_all(list(model.view_alphas(views)))
    e = fused - 1
    torch.testing.assert_close(probs[0], e.exp() / e.exp().sum(-1, keepdim=True))
    torch.testing.assert_close(unc, 3 / fused.sum(-1))
    assert torch.equal(probs[0].argmax(-1), fused.argmax(-1))
    with pytest.raises(ValueError, match="unknown model.probability 'belief'; choose one of dirichlet_mean, softmax"):
        TMC(3, [4, 2], probability="belief")


def test_tmc_needs_several_views():
    with pytest.raises(ValueError, match="several views"):
        TMC(3, [4])
