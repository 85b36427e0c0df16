"""MGP: Dirichlet label transform, product-of-experts fusion, initialisation and prediction."""

import math

import gpytorch
import pytest
import torch

from baselines.mgp import MGP, data_lengthscales, dirichlet_targets, entropy_weights, fuse_experts
from datamodules.base import TensorDataModule
from mnp.eval import metrics
from mnp.eval.protocols import add_noise


def test_dirichlet_targets_formula():
    eps = 0.01
    targets, s2 = dirichlet_targets(torch.tensor([1, 0]), 3, eps)
    # true class: α = 1 + ε; others: α = ε;  s̃² = log(1/α + 1),  ỹ = log α − s̃²/2
    for a, (row, col) in [(1 + eps, (0, 1)), (eps, (0, 0)), (eps, (0, 2)), (1 + eps, (1, 0))]:
        assert s2[row, col].item() == pytest.approx(math.log(1 / a + 1), rel=1e-6)
        assert targets[row, col].item() == pytest.approx(math.log(a) - 0.5 * math.log(1 / a + 1), rel=1e-6)
    # agrees with gpytorch's own Dirichlet classification transform
    y = torch.tensor([2, 0, 1, 2, 1])
    ref_s2, ref_targets, _ = gpytorch.likelihoods.DirichletClassificationLikelihood._prepare_targets(None, y, eps)
    t, s = dirichlet_targets(y, 3, eps)
    torch.testing.assert_close(t, ref_targets)
    torch.testing.assert_close(s.t(), ref_s2)


def brute_force_product(means, variances, weights):
    """Mean and variance of ∏_m N(x; μ_m, σ²_m)^{w_m}, normalised numerically on a grid."""
    x = torch.linspace(-20, 20, 400_001, dtype=torch.float64)
    log_p = sum(w * torch.distributions.Normal(m, v.sqrt()).log_prob(x) for m, v, w in zip(means, variances, weights))
    p = (log_p - log_p.max()).exp()
    p = p / p.sum()
    mean = (p * x).sum()
    return mean, (p * (x - mean) ** 2).sum()


@pytest.mark.parametrize("weighting", ["poe", "uniform", "entropy", "softmax_entropy"])
def test_product_of_experts_closed_form(weighting):
    means = torch.tensor([0.5, 2.0, -1.0], dtype=torch.float64)
    variances = torch.tensor([0.02, 0.05, 0.03], dtype=torch.float64)
    h = -(0.5 * torch.log(2 * math.pi * variances) + 0.5)  # negative differential entropies (all > 0 here)
    weights = {
        "poe": torch.ones(3, dtype=torch.float64),
        "uniform": torch.full((3,), 1 / 3, dtype=torch.float64),
        "entropy": h / h.sum(),
        "softmax_entropy": h.softmax(0),
    }[weighting]
    mean, var = fuse_experts(means[:, None], variances[:, None], weighting)
    # closed form: σ² = 1 / Σ w/σ²_m,  μ = σ² Σ w μ_m / σ²_m
    prec = weights / variances
    assert var.item() == pytest.approx(1 / prec.sum().item(), rel=1e-12)
    assert mean.item() == pytest.approx((prec * means).sum().item() / prec.sum().item(), rel=1e-12)
    bm, bv = brute_force_product(means, variances, weights)
    assert mean.item() == pytest.approx(bm.item(), abs=1e-6)
    assert var.item() == pytest.approx(bv.item(), rel=1e-4)


def test_uniform_fusion_by_hand():
    # two experts N(0, 1) and N(2, 1), weights 1/2: precision 1/2 + 1/2 = 1 -> N(1, 1); poe -> N(1, 1/2)
    m, v = torch.tensor([[0.0], [2.0]]), torch.ones(2, 1)
    assert [t.item() for t in fuse_experts(m, v, "uniform")] == [1.0, 1.0]
    assert [t.item() for t in fuse_experts(m, v, "poe")] == [1.0, 0.5]


def official_entropy_weights(variances):
    """The official combine_dist weights, h_m / Σ h, h the negative differential entropies."""
    h = -(0.5 * torch.log(2 * math.pi * variances) + 0.5)
    return h / h.sum(0)


def test_entropy_fusion_stays_a_gaussian_across_one_over_two_pi_e():
    """Variances on both sides of 1/(2πe), where h changes sign: the official weights leave [0, 1] (here
    iris' 2 views, ≈ +6.7 and −5.7) and the fused variance is negative. The weights must stay convex, and
    equal the official ones bit for bit where every view's h has the same sign."""
    same_side = torch.tensor([[0.02, 0.3], [0.05, 0.9], [0.01, 2.0]])  # columns: all h > 0, all h < 0
    assert torch.equal(
        entropy_weights(-(0.5 * torch.log(2 * math.pi * same_side) + 0.5)), official_entropy_weights(same_side)
    )
    means = torch.tensor([[-0.3, 1.2], [2.0, -0.5]])
    variances = torch.tensor([[0.026263, 0.0731], [0.15039, 0.0412]])  # straddling 1/(2πe) ≈ 0.0585, Σ h ≈ 0
    assert (official_entropy_weights(variances) < 0).any()  # the failure this guards against
    signed_var = fuse_experts(means, variances, "entropy_signed")[1]  # the official formula, kept as a switch
    torch.testing.assert_close(signed_var, 1 / (official_entropy_weights(variances) / variances).sum(0))
    assert (signed_var < 0).any()
    h = -(0.5 * torch.log(2 * math.pi * variances) + 0.5)
    w = h.abs() / h.abs().sum(0)
    mean, var = fuse_experts(means, variances, "entropy")
    torch.testing.assert_close(var, 1 / (w / variances).sum(0))
    torch.testing.assert_close(mean, var * (w * means / variances).sum(0))
    assert (var > 0).all() and (var <= variances.max(0).values).all()
    assert ((mean >= means.min(0).values) & (mean <= means.max(0).values)).all()  # a convex combination


def test_iris_two_views_give_finite_probabilities(one_thread):
    """iris as benchmarks/custom_defaults.py splits it (sepals | petals), MGP's own 20 full-batch steps: the
    petal view's latent variances fall below 1/(2πe) on some test rows while the sepal view's stay above."""
    from sklearn.datasets import load_iris

    d = load_iris()
    dm = TensorDataModule([d.data[:, :2], d.data[:, 2:]], d.target, scaling="standard", seed=0)
    dm.setup()
    torch.manual_seed(0)
    model = MGP(3, [2, 2], mc_samples=50)
    model.init_from_data(dm.train_views)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(20):
        loss, _ = model.training_loss(dm.train_views, dm.train_y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        _, variances = model.view_posteriors(dm.test_views)
        probs, unc = model.predict(dm.test_views)
    side = variances < 1 / (2 * math.pi * math.e)
    assert (side.any(0) & ~side.all(0)).any()  # the views straddle 1/(2πe) somewhere
    p = probs.mean(0)
    assert torch.isfinite(p).all() and torch.isfinite(unc).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(len(p)))
    assert math.isfinite(metrics.ece(p, dm.test_y)) and metrics.accuracy(p, dm.test_y) > 0.7


def test_init_predict_and_loss():
    torch.manual_seed(0)
    dims = [3, 2]
    train = [torch.rand(40, d) for d in dims]
    model = MGP(3, dims, num_inducing=8, mc_samples=50, lengthscale_init=1.0)
    model.init_from_data(train)
    for x, gp in zip(train, model.gps):
        z = gp.variational_strategy.inducing_points
        assert z.shape == (8, x.shape[1])
        assert all((x == row).all(-1).any() for row in z)  # random rows of the training data
        torch.testing.assert_close(gp.covar_module.base_kernel.lengthscale, torch.ones(1, x.shape[1]))
    assert int(model.num_data) == 40
    data_init = MGP(3, dims, num_inducing=8, inducing_init="kmeans")  # lengthscale std·√d, k-means centres
    data_init.init_from_data(train)
    for x, gp in zip(train, data_init.gps):
        torch.testing.assert_close(gp.covar_module.base_kernel.lengthscale[0], x.std(0) * math.sqrt(x.shape[1]))
        z = gp.variational_strategy.inducing_points
        assert ((z >= x.min(0).values - 1e-6) & (z <= x.max(0).values + 1e-6)).all()  # centres inside the data
    y = torch.randint(0, 3, (40,))
    loss, _ = model.training_loss(train, y)
    loss.backward()
    assert torch.isfinite(loss) and model.gps[0].variational_strategy.inducing_points.grad is not None
    model.eval()
    with torch.no_grad():
        probs, unc = model.predict([v[:5] for v in train])
        mu, var = fuse_experts(*model.view_posteriors([v[:5] for v in train]), "entropy")
    assert probs.shape == (50, 5, 3)
    torch.testing.assert_close(probs.sum(-1), torch.ones(50, 5))
    p = probs.mean(0)
    torch.testing.assert_close(unc, (p - p**2).sum(-1))
    # Monte Carlo softmax samples come from the fused Gaussian: logit differences recover its mean
    logp = probs.log()
    torch.testing.assert_close(
        (logp - logp[..., :1]).mean(0), mu - mu[:, :1], atol=6 * var.max().sqrt().item() * math.sqrt(2 / 50), rtol=0
    )


def test_untrained_model_refuses_to_train():
    model = MGP(3, [2], num_inducing=4)
    with pytest.raises(RuntimeError, match="init_from_data"):
        model.training_loss([torch.rand(5, 2)], torch.zeros(5, dtype=torch.long))


def test_constant_training_column_gets_a_typical_lengthscale():
    torch.manual_seed(0)
    x = torch.randn(50, 4) * torch.tensor([1.0, 2.0, 3.0, 0.0]) + 7.0  # column 3 constant (7.0)
    ls = data_lengthscales(x)
    spread = x.std(0) * 2.0  # std · √d, d = 4
    torch.testing.assert_close(ls[:3], spread[:3])  # varying columns: the official init, unchanged
    assert ls[3].item() == pytest.approx(spread[:3].median().item())  # not the old floor 1e-3
    torch.testing.assert_close(data_lengthscales(torch.full((10, 9), 0.5)), torch.full((9,), 3.0))  # nothing varies: √d


@pytest.mark.slow
def test_noise_on_a_constant_training_column_keeps_the_view(one_thread):
    """Digits as left/right halves: pixels 0, 16 (left) and 19 (right) are constant in the training split.
    Their lengthscales never train, so σ = 0.01 noise must not send the view to its prior."""
    from sklearn.datasets import load_digits

    d = load_digits()
    views = [d.images[:, :, :4].reshape(-1, 32), d.images[:, :, 4:].reshape(-1, 32)]
    dm = TensorDataModule(views, d.target, scaling="standard", seed=0)
    dm.setup()
    assert all((x.amax(0) == x.amin(0)).any() for x in dm.train_views)
    torch.manual_seed(0)
    model = MGP(10, [32, 32], num_inducing=50, mc_samples=50)
    model.init_from_data(dm.train_views)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(20):
        for idx in torch.randperm(len(dm.train_y)).split(200):
            loss, _ = model.training_loss([x[idx] for x in dm.train_views], dm.train_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()

    def accuracies(views):  # fused, then each view's own posterior mean
        probs, _ = model.predict(views)
        means, _ = model.view_posteriors(views)
        return [(p.argmax(-1) == dm.test_y).float().mean().item() for p in (probs.mean(0), *means)]

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        clean = accuracies(dm.test_views)
        assert clean[0] > 0.9
        for v in (0, 1):
            noisy = accuracies(add_noise(dm.test_views, [v], 0.01, g))
            assert noisy[0] == pytest.approx(clean[0], abs=0.01), (v, clean, noisy)  # fused accuracy
            assert noisy[1 + v] == pytest.approx(clean[1 + v], abs=0.01), (v, clean, noisy)  # the noised view itself


def test_constant_column_report():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from constant_columns import view_report

    x = torch.tensor([[1.0, 0.0, 5.0], [3.0, 0.0, 5.0], [1.0, 0.0, 5.0], [3.0, 4.0, 5.0]])
    rep = view_report(x)
    assert rep["constant"] == [2] and rep["n_constant"] == 1 and rep["dim"] == 3
    assert rep["n_floored_before"] == 1 and rep["min_std_over_median"] == pytest.approx(1.0)
