"""Losses: the supervised contrastive loss (eq. 10) against a naive per-anchor loop, L_RBF's paper and
official forms, the predictive NLL (eq. 14) and the unimodal errors (eq. 3)."""

import math

import pytest
import torch
from mnp_utils import flat_mnp

from mnp.model.losses import predictive_nll, supervised_contrastive, unimodal_error


def naive_supcon(sim: torch.Tensor, y: torch.Tensor, tau: float, self_in_denominator: bool) -> float:
    """Eq. 10 for one modality, anchor by anchor, averaged over anchors with at least one positive."""
    n, losses = len(y), []
    for i in range(n):
        positives = [p for p in range(n) if p != i and y[p] == y[i]]
        if not positives:
            continue
        denom = sum(math.exp(sim[i, k].item() / tau) for k in range(n) if k != i)
        if self_in_denominator:
            denom += math.exp(0.0)
        losses.append(-sum(math.log(math.exp(sim[i, p].item() / tau) / denom) for p in positives) / len(positives))
    return sum(losses) / len(losses) if losses else 0.0


@pytest.mark.parametrize("self_in_denominator", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_supcon_equals_naive_loop(self_in_denominator, seed):
    g = torch.Generator().manual_seed(seed)
    m, n, tau = 3, 12, 0.25
    sim = torch.rand(m, n, n, generator=g, dtype=torch.float64)
    sim = (sim + sim.transpose(1, 2)) / 2
    y = torch.randint(0, 4, (n,), generator=g)
    y[-1] = 9  # an anchor without positives is skipped
    got = supervised_contrastive(sim, y, tau, self_in_denominator)
    for k in range(m):
        assert got[k].item() == pytest.approx(naive_supcon(sim[k], y, tau, self_in_denominator), rel=1e-6)


def test_supcon_without_any_positive_pair_is_zero():
    assert supervised_contrastive(torch.rand(2, 4, 4), torch.arange(4), 0.1).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("official", [False, True])
def test_rbf_loss_paper_and_official_forms(official):
    torch.manual_seed(0)
    forms = dict(rbf_reduce="sum", lengthscale_penalty="half_sq", self_in_denominator=True) if official else {}
    model = flat_mnp(num_classes=3, view_dims=[4, 6], d_e=8, alpha=0.3, tau=0.5, lengthscale_form="l", **forms)
    with torch.no_grad():
        model.similarity.raw_lengthscale[1].add_(0.7)
    targets, y = [torch.randn(10, 4), torch.randn(10, 6)], torch.randint(0, 3, (10,))
    got = model._rbf_loss(targets, y).item()
    sim = model.similarity(targets, targets).detach()
    cl = [naive_supcon(sim[m].double(), y, 0.5, official) for m in range(2)]
    ls = [l.detach().double() for l in model.similarity.lengthscales()]
    if official:  # Σ_m (L_CL + α‖l‖²/2)
        want = sum(cl) + 0.3 * sum(0.5 * (l**2).sum().item() for l in ls)
    else:  # (1/M) Σ_m L_CL + α (1/M) Σ_m ‖l‖
        want = sum(cl) / 2 + 0.3 * sum(l.norm().item() for l in ls) / 2
    assert got == pytest.approx(want, rel=1e-5)


def test_predictive_nll_forms():
    torch.manual_seed(0)
    logits = torch.randn(6, 2, 5, 4, dtype=torch.float64)  # (S, P, B, K)
    y = torch.randint(0, 4, (5,))
    probs = logits.softmax(-1)
    p_y = probs[..., torch.arange(5), y]  # (S, P, B)
    want_nll_of_mean = -(p_y.mean(0).log()).mean(-1)
    want_mean_ce = -(p_y.log().mean(0)).mean(-1)
    assert torch.allclose(predictive_nll(logits, y, "nll_of_mean").double(), want_nll_of_mean, atol=1e-6)
    assert torch.allclose(predictive_nll(logits, y, "mean_ce").double(), want_mean_ce, atol=1e-6)
    assert (want_mean_ce >= want_nll_of_mean).all()  # Jensen: E[−log p] ≥ −log E[p]


@pytest.mark.parametrize("kind", ["nll_of_mean", "mean_ce"])
def test_label_smoothing_is_the_cross_entropy_of_the_smoothed_target(kind):
    """loss.label_smoothing ε: with one logit sample it is torch's label-smoothed cross entropy; with S samples, the
    cross entropy of (1 − ε)·one-hot + ε/K with E_s[softmax] (nll_of_mean) or averaged over the samples (mean_ce),
    computed here by brute force; ε = 0 is eq. 14 bit for bit."""
    torch.manual_seed(1)
    logits = torch.randn(1, 7, 5)
    y = torch.randint(0, 5, (7,))
    want = torch.nn.functional.cross_entropy(logits[0], y, label_smoothing=0.2)
    assert torch.allclose(predictive_nll(logits, y, kind, 0.2), want, atol=1e-6)
    logits = torch.randn(6, 2, 7, 5, dtype=torch.float64)  # (S, P, B, K)
    target = torch.full((7, 5), 0.2 / 5, dtype=torch.float64)
    target[torch.arange(7), y] += 0.8
    probs = logits.softmax(-1)
    if kind == "nll_of_mean":
        brute = -(target * probs.mean(0).log()).sum(-1).mean(-1)
    else:
        brute = -(target * probs.log()).sum(-1).mean(-1).mean(0)
    assert torch.allclose(predictive_nll(logits, y, kind, 0.2).double(), brute, atol=1e-6)
    assert torch.equal(predictive_nll(logits, y, kind, 0.0), predictive_nll(logits, y, kind))


def test_label_smoothing_caps_the_confidence_its_loss_asks_for():
    """The minimiser of the smoothed loss over free logits gives the label 1 − ε + ε/K, not 1."""
    eps, k = 0.1, 4
    logits = torch.zeros(1, 1, k, requires_grad=True)
    y = torch.tensor([2])
    opt = torch.optim.LBFGS([logits], max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = predictive_nll(logits, y, "nll_of_mean", eps)
        loss.backward()
        return loss

    opt.step(closure)
    p = logits.detach().softmax(-1)[0, 0]
    assert p[2].item() == pytest.approx(1 - eps + eps / k, abs=1e-4)
    assert p[0].item() == pytest.approx(eps / k, abs=1e-4)


def test_the_models_predictive_loss_reads_its_label_smoothing():
    model = flat_mnp(4, [3, 5], d_e=8, label_smoothing=0.3)
    torch.manual_seed(0)
    mu, var = torch.randn(3, 6, 8), torch.rand(3, 6, 8)  # (1 + M, B, d)
    y = torch.randint(0, 4, (6,))
    logits, nll = model._decode_and_nll(mu, var, y)
    assert torch.equal(nll, predictive_nll(logits, y, model.spec.loss.ty, 0.3))
    assert not torch.allclose(nll, predictive_nll(logits, y, model.spec.loss.ty))


@pytest.mark.parametrize("eps", [-0.1, 1.0])
def test_label_smoothing_outside_zero_to_one_is_refused(eps):
    from mnp.model.parts import LossPart

    with pytest.raises(ValueError, match="label_smoothing"):
        LossPart(label_smoothing=eps)


def test_unimodal_errors():
    probs = torch.tensor([[[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]])  # (M=1, B=2, K=3)
    y = torch.tensor([0, 1])
    mse = unimodal_error(probs, y, "mse")
    assert torch.allclose(mse, torch.tensor([[(0.09 + 0.04 + 0.01) / 3, (0.01 + 0.81 + 0.64) / 3]]))
    assert torch.allclose(unimodal_error(probs, y, "ce"), -torch.tensor([[0.7, 0.1]]).log())
