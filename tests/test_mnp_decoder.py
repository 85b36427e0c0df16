"""Monte Carlo prediction (eqs. 11–13): sample shapes and moments, the σ²-as-std switch, predict()."""

import pytest
import torch
from mnp_utils import flat_mnp
from torch import nn

from mnp.eval import metrics
from mnp.model.decoder import Decoder, sample_logits


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


@pytest.mark.parametrize("floor", [0.01, 0.3, 0.9])
def test_logit_scale_never_falls_below_its_floor(floor):
    """decoder.scale_floor f: scale = f + (1 - f)·softplus(h), so it tends to f as h -> -inf and the logit samples
    of a fixed z then have variance f² (eq. 11); f = 0.01 is the paper's code, bit for bit."""
    torch.manual_seed(0)
    dec = Decoder(8, 3, scale_floor=floor)
    z = torch.randn(50, 8)
    h = dec.fc2(dec.norm(torch.nn.functional.leaky_relu(dec.fc1(z), 0.3)))[..., 3:]
    assert torch.equal(dec(z)[1], floor + (1 - floor) * torch.nn.functional.softplus(h))
    if floor == 0.01:
        assert torch.equal(dec(z)[1], 0.01 + 0.99 * torch.nn.functional.softplus(h))
    assert (dec(z)[1] >= floor).all()
    with torch.no_grad():  # the scale half of the last layer driven to -inf: the scale is the floor itself
        dec.fc2.weight[3:].zero_()
        dec.fc2.bias[3:].fill_(-40.0)
    loc, scale = dec(z[:1])
    assert torch.allclose(scale, torch.full_like(scale, floor))
    logits = sample_logits(dec, z[:1], None, 100)  # 10,000 draws around the deterministic loc
    assert torch.allclose(logits.var(0), torch.full_like(loc, floor**2), rtol=0.05)


def test_a_higher_floor_softens_the_prediction():
    """Where the network asks for almost no logit noise (the over-confident regime: the scale head's raw output
    far below 0), a higher floor still draws noisy logits, so the Monte Carlo prediction E[softmax] is less
    confident (eq. 12): the calibration candidate's mechanism."""
    torch.manual_seed(0)
    low = Decoder(8, 3, scale_floor=0.01)
    high = Decoder(8, 3, scale_floor=0.9)
    high.load_state_dict(low.state_dict())
    z = torch.randn(1, 200, 8)
    with torch.no_grad():
        for dec in (low, high):
            dec.fc2.bias[:3] = torch.tensor([3.0, 0.0, -3.0])  # a confident mean
            dec.fc2.weight[3:].mul_(0.1)
            dec.fc2.bias[3:] = -6.0  # softplus(h) about 0.0025: the scale is about the floor
    conf = [
        sample_logits(d, z, None, 20, generator=torch.Generator().manual_seed(1)).softmax(-1).mean(0).amax(-1)
        for d in (low, high)
    ]
    assert (conf[1] < conf[0]).float().mean() > 0.95


@pytest.mark.parametrize("floor", [0.0, 1.0, -0.1])
def test_scale_floor_outside_the_open_unit_interval_is_refused(floor):
    from mnp.model.parts import DecoderPart

    with pytest.raises(ValueError, match="scale_floor") as e:
        DecoderPart(scale_floor=floor)
    assert "\n" not in str(e.value)
