"""Numerical safety of MNP: huge inputs, far targets, sparsemax in float32 under bf16 autocast, floors
on every variance and positive parameter."""

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from entmax import sparsemax
from mnp_utils import flat_mnp

from datamodules import TensorDataModule
from mnp.model.aggregation import mba_posterior
from mnp.model.attention import POSITIVE_FLOOR, RBFSimilarity, normalise, to_positive

FLOOR = 0.01  # s, q and the logit scale: 0.01 + 0.99·softplus (mnp.model.encoders.positive_scale)
K, DIMS = 3, [4, 6]


pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread is fastest on 2 shared cores


def blobs(scale=1.0, n_per_class=30, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(K), n_per_class)
    views = [(rng.normal(size=(len(y), d)) + 3.0 * y[:, None]) * scale for d in DIMS]
    idx = rng.permutation(len(y))
    return TensorDataModule(views, y, np.sort(idx[: len(y) * 3 // 4]), np.sort(idx[len(y) * 3 // 4 :]), batch_size=16)


def mnp(**kw):
    base = dict(num_classes=K, view_dims=DIMS, d_e=16, memory_size=12, projection="linear", optim={"lr": 1e-2})
    base.update(kw)
    return flat_mnp(**base)


class Losses(pl.Callback):
    def __init__(self):
        self.values = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.values.append(float(outputs["loss"] if isinstance(outputs, dict) else outputs))


def fit(model, dm, epochs):
    losses = Losses()
    pl.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[losses],
    ).fit(model, dm)
    return losses.values


def on_simplex(p, atol=1e-5):
    return bool(torch.isfinite(p).all() and (p >= 0).all() and torch.allclose(p.sum(-1), torch.ones(()), atol=atol))


def far_from(views, distance, seed=5):
    """Each target moved by ``distance`` in a random direction, in every view."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for v in views:
        d = torch.randn(v.shape, generator=g)
        out.append(v + distance * d / d.norm(dim=1, keepdim=True))
    return out


@pytest.mark.parametrize("similarity", ["rbf", "dot"])
def test_inputs_scaled_by_1e6_train_with_finite_loss_and_probabilities(similarity):
    pl.seed_everything(0, verbose=False)
    dm = blobs(scale=1e6)
    model = mnp(similarity=similarity)
    losses = fit(model, dm, 3)
    assert len(losses) == 15 and np.isfinite(losses).all()
    dm.setup()
    probs, unc = model.predict_tensors(dm.test_views)
    assert on_simplex(probs) and torch.isfinite(unc).all()
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_far_target_is_more_uncertain_than_in_distribution_targets():
    """A target at distance 1e6 from every context point: every RBF score underflows to 0, sparsemax of the
    all-zero row is the uniform weight, so the target sees the average of all classes' representations:
    finite probabilities and a higher expected entropy than the in-distribution targets."""
    pl.seed_everything(0, verbose=False)
    dm = blobs()
    model = mnp(num_samples=10)
    fit(model, dm, 10)
    dm.setup()
    p_in, u_in = model.predict_tensors(dm.test_views)
    far = far_from(dm.test_views, 1e6)
    p_far, u_far = model.predict_tensors(far)
    assert (p_in.argmax(-1) == dm.test_y).float().mean() > 0.9  # the fit is real
    assert on_simplex(p_in) and on_simplex(p_far) and torch.isfinite(u_far).all()
    with torch.no_grad():
        _, attn, *_ = model._attend(far)
    assert torch.equal(attn, torch.full_like(attn, 1 / model.memory.size))
    assert u_far.min() > u_in.median() and u_far.mean() > 3 * u_in.mean()
    # far in one view only: that view's attention is uniform, the other view still attends sparsely
    with torch.no_grad():
        _, attn_one, *_ = model._attend([far[0], dm.test_views[1]])
    assert torch.equal(attn_one[0], attn[0]) and (attn_one[1] == 0).any()
    assert on_simplex(model.predict_tensors([far[0], dm.test_views[1]])[0])


def test_sparsemax_runs_in_float32_under_bf16_autocast():
    """Attention weights under bf16 autocast equal the float32 computation bit for bit; bf16 sparsemax
    would be off the simplex by ~1e-3."""
    torch.manual_seed(0)
    sim = RBFSimilarity([8], lengthscale_init=3.0, form="l")
    t, c = torch.randn(32, 8), torch.randn(50, 8)
    ref = normalise(sim([t], [c]), "sparsemax")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = sim([t], [c])
        out = normalise(scores, "sparsemax")
        from_bf16 = normalise(scores.bfloat16(), "sparsemax")
    assert scores.dtype == out.dtype == from_bf16.dtype == torch.float32
    assert torch.equal(out, ref)  # same numbers as without autocast
    assert torch.equal(from_bf16, sparsemax(scores.bfloat16().float(), dim=-1))
    assert (out.sum(-1) - 1).abs().max() < 1e-6
    bf16_sum_error = (sparsemax(scores.bfloat16(), dim=-1).float().sum(-1) - 1).abs().max()
    assert bf16_sum_error > 1e-4  # what running it in bf16 would cost (the check above can fail)
    # the whole model under autocast: attention in float32 on the simplex, finite probabilities
    model = mnp()
    dm = blobs()
    dm.setup()
    model.init_memory(dm.train_views, dm.train_y)
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        _, attn, *_ = model._attend(dm.test_views)
        probs, unc = model.predict(dm.test_views)
    assert attn.dtype == torch.float32 and (attn.sum(-1) - 1).abs().max() < 1e-6
    assert on_simplex(probs.float(), atol=1e-3) and torch.isfinite(unc).all()


def saturate(model, sign):
    """Drive every positive quantity to its floor (sign=-1) or to a huge value (sign=+1): LayerNorm biases
    of the variance encoders and the decoder's scale outputs at ±1e4, raw lengthscales at ±1e4."""
    with torch.no_grad():
        for enc in model.encoders:
            for e in (enc.enc_s, enc.enc_q):
                e.norm.norm.weight.zero_()
                e.norm.norm.bias.fill_(sign * 1e4)
        model.decoder.fc2.weight[K:].zero_()
        model.decoder.fc2.bias[K:].fill_(sign * 1e4)
        for raw in model.similarity.raw_lengthscale:
            raw.fill_(sign * 1e4)


@pytest.mark.parametrize("param", ["softplus", "exp"])
def test_variances_and_positive_parameters_are_floored(param):
    pl.seed_everything(0, verbose=False)
    dm = blobs()
    dm.setup()
    model = mnp(lengthscale_param=param, amplitude=True)
    model.init_memory(dm.train_views, dm.train_y)
    model.eval()
    saturate(model, -1)
    with torch.no_grad():
        model.similarity.raw_amplitude.fill_(-1e4)
        _, attn, r_star, s_star, u, q = model._attend(dm.test_views)
        mu, var = mba_posterior(r_star, s_star, u, q)
        loc, scale = model.decoder(mu)
        probs, unc = model.predict(dm.test_views)
    m = len(DIMS)
    for l in model.similarity.lengthscales():
        assert torch.allclose(l, torch.full_like(l, POSITIVE_FLOOR))
    assert torch.allclose(to_positive(model.similarity.raw_amplitude, param), torch.tensor(POSITIVE_FLOOR))
    assert torch.allclose(s_star, torch.tensor(FLOOR)) and torch.allclose(q, torch.tensor(FLOOR))
    assert torch.allclose(var, torch.tensor(1 / (m * 2 / FLOOR)))  # σ²_z = 1 / Σ_m (1/s + 1/q), all at the floor
    assert torch.allclose(scale, torch.tensor(FLOOR))
    assert on_simplex(attn) and on_simplex(probs) and torch.isfinite(unc).all()
    # the other extreme: huge variances and lengthscales stay finite
    saturate(model, +1)
    with torch.no_grad():
        _, attn, r_star, s_star, u, q = model._attend(dm.test_views)
        mu, var = mba_posterior(r_star, s_star, u, q)
        probs, unc = model.predict(dm.test_views)
    assert torch.isfinite(s_star).all() and torch.isfinite(var).all() and (var > 0).all()
    assert on_simplex(attn) and on_simplex(probs) and torch.isfinite(unc).all()
