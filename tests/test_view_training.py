"""Stronger single views (mnp.model.view_training, docs/method.md §1.9): the per-view loss weight λ against a decode by
hand, view dropout's drop rate, its one-view guarantee and a dropped view's absence from the fused posterior, and
both switches in the sync-free and the emulated-graph training step."""

import sys
from pathlib import Path

import pytest
import torch
from mnp_utils import flat_mnp

from mnp.model.aggregation import random_modality_mask
from mnp.model.decoder import sample_logits
from mnp.model.view_training import fusion_weights, view_dropout_mask
from mnp.tools.bench import bench_cases, step_metrics

sys.path.insert(0, str(Path(__file__).parent))
from test_step_graphs import assert_same_training, fit  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

DIMS, K = (5, 7, 4), 3


def tiny(**kw):
    torch.manual_seed(0)
    model = flat_mnp(
        **{
            **dict(
                num_classes=K, view_dims=list(DIMS), d_e=8, memory_size=9, projection="linear", lengthscale_form="l"
            ),
            **kw,
        }
    )
    g = torch.Generator().manual_seed(1)
    y = torch.arange(30) % K
    views = [torch.randn(30, d, generator=g) + y[:, None].float() for d in DIMS]
    model.init_memory(views, y)
    return model.train(), [v[:12] for v in views], y[:12]


def by_hand_view_nlls(model, views, y):
    """Each view's −log mean_s softmax(logits_s)[y], averaged over the batch, decoded from its own posterior with
    the draws the training loss makes after the same seed."""
    _, _, r_star, s_star, u, q = model._attend(views)
    (mu, var), (mu_m, var_m) = model.aggregation.posteriors(r_star, s_star, u, q)
    logits = sample_logits(
        model.decoder, torch.cat([mu[None], mu_m]), torch.cat([var[None], var_m]), model.spec.decoder.num_samples
    )  # (S·S, 1 + M, B, K): the training loss's one decoder call
    p = logits.double().softmax(-1).mean(0)[1:]  # (M, B, K)
    return -p.gather(-1, y.expand(len(DIMS), -1).unsqueeze(-1)).squeeze(-1).log().mean(-1)  # (M,)


def grads(model):
    return {k: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for k, p in model.named_parameters()}


@pytest.mark.parametrize("lam", [0.3, 1.0])
def test_view_loss_weight_adds_lambda_times_the_views_mean_nll_and_its_gradient(lam):
    model, views, y = tiny()
    torch.manual_seed(5)
    base, _ = model.training_loss(views, y)
    model.zero_grad()
    base.backward()
    g0 = grads(model)
    model.spec = model.spec.replace("loss", view_weight=lam)
    torch.manual_seed(5)
    loss, logs = model.training_loss(views, y)
    model.zero_grad()
    loss.backward()
    g1 = grads(model)
    torch.manual_seed(5)
    nll = by_hand_view_nlls(model, views, y)
    torch.testing.assert_close(loss.double() - base.double(), lam * nll.mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logs["view_nll"].double(), nll.mean(), rtol=1e-5, atol=1e-6)
    model.zero_grad()
    (lam * nll.mean()).backward()  # the extra term's gradient, by itself
    extra = grads(model)
    for k in g0:
        torch.testing.assert_close(g1[k] - g0[k], extra[k], rtol=1e-4, atol=1e-6, msg=k)
    # view m's term reaches view m's encoder and no other view's
    for m in range(len(DIMS)):
        model.zero_grad()
        torch.manual_seed(5)
        by_hand_view_nlls(model, views, y)[m].backward()
        g = grads(model)
        for j in range(len(DIMS)):
            own = sum(g[k].abs().sum() for k in g if k.startswith(f"encoders.{j}.enc_r."))
            assert (own > 0) if j == m else (own == 0), (m, j)


def test_view_dropout_drop_rate_and_one_view_kept():
    torch.manual_seed(0)
    m, p = 3, 0.3
    w = view_dropout_mask(torch.ones(200_000, m), p)
    assert set(w.unique().tolist()) <= {0.0, 1.0} and (w.sum(1) >= 1).all()
    rate = 1 - w.mean(0)
    expected = p - p**m / m  # dropped unless it is the pick of a row that lost every view
    assert (rate - expected).abs().max() < 0.005, (rate, expected)  # 5 standard errors
    single = view_dropout_mask(torch.ones(60_000, m), 1.0)  # p = 1: one view per row, uniformly drawn
    assert (single.sum(1) == 1).all() and ((single.mean(0) - 1 / m).abs() < 0.01).all()


def test_view_dropout_after_the_modality_mask_keeps_only_present_views():
    torch.manual_seed(0)
    m, p = 4, 0.4
    present = random_modality_mask(100_000, m, torch.device("cpu"))  # subsets of >= 2 views
    w = view_dropout_mask(present, p)
    assert (w <= present).all() and (w.sum(1) >= 1).all()
    k = present.sum(1)  # a row with k views loses each with probability p − p^k / k
    expected = (k * (p - p**k / k)).sum() / k.sum()
    dropped = (present - w).sum() / present.sum()
    assert abs(float(dropped - expected)) < 0.004, (float(dropped), float(expected))


def test_fusion_weights_off_draws_nothing():
    torch.manual_seed(0)
    state = torch.get_rng_state()
    assert fusion_weights(8, 3, torch.device("cpu"), False, 0.0) is None
    assert torch.equal(state, torch.get_rng_state())  # switches off: the random stream of before


@pytest.mark.parametrize("aggregation", ["mba", "mean"])
def test_a_dropped_view_has_no_influence_on_its_rows_fused_posterior(aggregation, monkeypatch):
    model, views, y = tiny(view_dropout=0.5, aggregation=aggregation)
    seen = []
    posteriors = model.aggregation.posteriors

    def spy(*args):
        out = posteriors(*args)
        seen.append((args[-1], out[0]))
        return out

    monkeypatch.setattr(model.aggregation, "posteriors", spy)
    for m in range(len(DIMS)):
        torch.manual_seed(3)
        model.training_loss(views, y)
        changed = [v.clone() for v in views]
        changed[m] = changed[m] + 5.0 * torch.randn_like(changed[m])
        torch.manual_seed(3)
        model.training_loss(changed, y)
        (w, (mu, var)), (w2, (mu2, var2)) = seen[-2:]
        assert torch.equal(w, w2) and (w.sum(1) >= 1).all()
        dropped = w[:, m] == 0
        assert 0 < dropped.sum() < len(y), "the draw should drop view m in some rows and keep it in others"
        assert torch.equal(mu[dropped], mu2[dropped])
        assert (mu[~dropped] != mu2[~dropped]).any(1).all()
        if var is not None:
            assert torch.equal(var[dropped], var2[dropped])


def test_both_switches_step_without_host_syncs():
    model, views, y = tiny(view_dropout=0.3, view_loss_weight=0.5, modality_mask=True, clip_norm=0.1)
    model.capturable = True
    out = step_metrics.measure_step(model, bench_cases.first_optimizer(model), views, y, explain=False)
    assert out["host_syncs_per_train_step"] == 0, out["host_sync_ops"]
    assert out["tensors_from_python_per_train_step"] == 0


@pytest.mark.slow
def test_emulated_graph_training_with_both_switches_equals_eager_bit_for_bit(tmp_path):
    kw = dict(view_dropout=0.25, view_loss_weight=0.3)
    eager, te, _ = fit(False, tmp_path / "e", **kw)
    graph, tg, replays = fit("emulate", tmp_path / "g", **kw)
    assert replays
    assert_same_training(graph, eager, tg, te)
