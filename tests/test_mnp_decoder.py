"""Monte Carlo prediction (eqs. 11–13): sample shapes and moments, the σ²-as-std switch, predict()."""

import pytest
import torch
from torch import nn

from mnp.core import metrics
from mnp.decoder import Decoder, sample_logits
from mnp_utils import flat_mnp


class LinearGaussianDecoder(nn.Module):
    """loc = z (K = d), constant scale: logits are then N(μ_z, var_z + scale²) in closed form."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, z):
        return z, torch.full_like(z, self.scale)


@pytest.mark.parametrize("sigma_as_std", [False, True])
def test_logit_samples_have_the_marginal_moments(sigma_as_std):
    torch.manual_seed(0)
    mu = torch.tensor([[1.0, -2.0, 0.5]])
    var = torch.tensor([[0.25, 0.5, 0.1]])
    logits = torch.cat([sample_logits(LinearGaussianDecoder(0.3), mu, var, 20, sigma_as_std) for _ in range(200)])
    assert logits.shape == (200 * 400, 1, 3)
    std_z = var if sigma_as_std else var.sqrt()  # the official bug uses σ² as the standard deviation
    assert torch.allclose(logits.mean(0), mu, atol=0.02)
    assert torch.allclose(logits.var(0), std_z**2 + 0.09, rtol=0.03)


def test_shapes_and_deterministic_latent():
    dec = Decoder(16, 5)
    mu = torch.randn(3, 7, 16)  # (P posteriors, B, d)
    out = sample_logits(dec, mu, torch.rand(3, 7, 16) + 0.1, 4)
    assert out.shape == (16, 3, 7, 5)
    det = sample_logits(dec, mu, None, 4)
    assert det.shape == (16, 3, 7, 5)
    loc, scale = dec(mu)
    assert (scale > 0.01 - 1e-7).all()
    assert torch.allclose(det.mean(0), loc, atol=3 * scale.max().item())


def test_predict_returns_per_sample_softmaxes_and_expected_entropy():
    torch.manual_seed(0)
    model = flat_mnp(num_classes=4, view_dims=[3, 5], d_e=16, memory_size=8, num_samples=3).eval()
    y = torch.arange(4).repeat(5)
    views = [torch.randn(20, 3), torch.randn(20, 5)]
    with pytest.raises(RuntimeError, match="init_memory"):
        model.predict(views)
    model.init_memory(views, y)
    probs, unc = model.predict(views)
    assert probs.shape == (9, 20, 4) and torch.allclose(probs.sum(-1), torch.ones(9, 20), atol=1e-5)
    assert torch.allclose(unc, metrics.expected_entropy(probs))
    assert (model.extra_scores(probs)["entropy"] >= unc - 1e-6).all()  # H[E p] ≥ E H[p]


def test_eval_samples_sets_the_predictions_monte_carlo_size_and_leaves_training_alone():
    """``decoder.eval_samples`` is S of eq. 12 at evaluation only: the prediction and the per-view predictions
    draw S·S softmaxes, their Monte Carlo mean settles as S grows (its spread over draws falls like 1/S), and the
    training loss, which decodes with ``num_samples``, is the same draw for draw."""
    torch.manual_seed(0)
    model = flat_mnp(num_classes=4, view_dims=[3, 5], d_e=16, memory_size=8, num_samples=3)
    y = torch.arange(4).repeat(5)
    views = [torch.randn(20, 3), torch.randn(20, 5)]
    model.init_memory(views, y)
    torch.manual_seed(1)
    loss_paper = model.training_loss(views, y)[0]
    model.spec = model.spec.replace("decoder", eval_samples=7)
    torch.manual_seed(1)
    assert torch.equal(model.training_loss(views, y)[0], loss_paper)
    model.eval()
    probs, _ = model.predict(views)
    assert probs.shape == (49, 20, 4) and all(p.shape == (49, 20, 4) for p in model.view_predictions(views))
    spread = {}
    for s in (1, 20):
        model.spec = model.spec.replace("decoder", eval_samples=s)
        means = []
        for seed in range(8):
            torch.manual_seed(seed)
            means.append(model.predict(views)[0].mean(0))
        spread[s] = torch.stack(means).std(0).mean().item()
    assert spread[20] < spread[1] / 5, spread
