"""Distance-aware view weighting (mnp/model/view_weighting.py, eq. 8′): its pieces against closed forms, and its
principle on a trained model: a view replaced by pure noise loses its MBA weight."""

import pytest
import torch
from cfg_utils import compose_train

from mnp.cli.builders import build_datamodule, build_model
from mnp.cli.pipeline import train
from mnp.cli.run_loading import load_run
from mnp.model.aggregation import mba_posterior
from mnp.model.view_weighting import nearest_sq_dist, proximity, reference_sq_dist, view_weights

pytestmark = pytest.mark.usefixtures("one_thread")

TWO_VIEWS = [
    "model=mnp",
    "dataset.num_views=2",
    "dataset.n_train=400",
    "dataset.n_test=400",
    "model.encoder.d_e=32",
    "model.encoder.resmlp_depth=2",
    "model.memory.size=40",
    "trainer.max_epochs=15",
    "eval.noise=false",
    "skip_if_done=false",
    "seed=3",
    "model.aggregation.view_weighting.mode=distance",
]


def test_nearest_distance_inverts_the_rbf_scores():
    d2 = torch.tensor([[[0.5, 2.0, 0.1]], [[4.0, 9.0, 3.0]]])  # (M=2, B=1, N=3)
    amp = torch.tensor([1.0, 0.5])
    scores = amp[:, None, None] * torch.exp(-0.5 * d2)
    assert torch.allclose(nearest_sq_dist(scores, amp), torch.tensor([[0.1], [3.0]]), atol=1e-5)


def test_proximity_and_relative_weights_closed_form():
    d2 = torch.tensor([[1.0, 4.0, 40.0], [2.0, 2.0, 2.0]])  # (M, B)
    ref = torch.tensor([2.0, 1.0])
    kappa = proximity(d2, ref, power=1.0)
    assert torch.allclose(kappa, torch.tensor([[1.0, 0.5, 0.05], [0.5, 0.5, 0.5]]))
    w = view_weights(d2, ref, power=2.0)  # (B, M): κ² relative to the best view of each target
    assert torch.allclose(w, torch.tensor([[1.0, 0.25], [1.0, 1.0], [0.01, 1.0]]))


def test_reference_is_the_quantile_of_nonzero_training_distances_over_chunks(monkeypatch):
    import mnp.model.view_weighting as vw

    monkeypatch.setattr(vw, "CHUNK", 3)
    x = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # d² = x for view 0 (a zero: a memory row), 2x for view 1
    calls = []

    def d2_of(views):
        calls.append(views[0].shape[0])
        return torch.stack([views[0], 2 * views[0]])

    ref = reference_sq_dist(d2_of, [x], quantile=0.5)
    assert calls == [3, 3, 1] and torch.allclose(ref, torch.tensor([3.5, 7.0]))


def test_weighted_mba_is_eq8_with_tempered_terms():
    g = torch.Generator().manual_seed(0)
    r, u = torch.randn(2, 4, 3, generator=g), torch.randn(2, 1, 3, generator=g)
    s, q = torch.rand(2, 4, 3, generator=g) + 0.1, torch.rand(2, 1, 3, generator=g) + 0.1
    w = torch.tensor([[1.0, 0.5], [1.0, 0.0], [0.2, 1.0], [1.0, 1.0]])
    mu, var = mba_posterior(r, s, u, q, w)
    for b in range(4):
        prec = sum(w[b, m] * (1 / s[m, b] + 1 / q[m, 0]) for m in range(2))
        mean = sum(w[b, m] * (r[m, b] / s[m, b] + u[m, 0] / q[m, 0]) for m in range(2)) / prec
        assert torch.allclose(var[b], 1 / prec) and torch.allclose(mu[b], mean, atol=1e-6)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run = tmp_path_factory.mktemp("vw") / "run"
    res = train(compose_train(run, TWO_VIEWS))
    _, _, _, dm, model, _ = load_run(run / "checkpoints" / "last.ckpt")
    dm.setup("test")
    return res, dm, model


def _accuracy(model, views, y, weights=None):
    with torch.no_grad():
        _, scores, _, r, s, u, q = model._attend_scores(views)
        w = model._view_weights(scores) if weights is None else weights
        mu, var = model.aggregation(r, s, u, q, w)
        probs = model.decoder(mu)[0].softmax(-1)
    return float((probs.argmax(-1) == y).float().mean()), w


def test_a_view_replaced_by_noise_loses_its_weight_and_the_other_view_carries_the_prediction(trained):
    """The principle: view 1 replaced by pure noise N(0, 10²) has its MBA weight cut by ≥ 10× (it is 1 on
    clean data for almost every target), and the accuracy stays within 2 points of the accuracy with view 1
    removed (MBA over view 0 alone). Without the weighting (the paper's eq. 8) the noise costs far more."""
    res, dm, model = trained
    model.eval()
    views, y = [v.float() for v in dm.test_views], dm.test_y
    clean_acc, w_clean = _accuracy(model, views, y)
    noised = [views[0], 10.0 * torch.randn(views[1].shape, generator=torch.Generator().manual_seed(1))]
    noisy_acc, w_noisy = _accuracy(model, noised, y)
    removed_acc, _ = _accuracy(model, views, y, torch.tensor([[1.0, 0.0]]).expand(len(y), 2))
    assert w_clean[:, 1].mean() > 0.9 and w_clean[:, 1].mean() / w_noisy[:, 1].mean() >= 10
    assert abs(noisy_acc - removed_acc) <= 0.02 and removed_acc > 0.8
    paper_acc, _ = _accuracy(model, noised, y, torch.ones(len(y), 2))
    assert paper_acc < noisy_acc - 0.03, (paper_acc, noisy_acc)
    assert res["test/acc"] > 0.85 and abs(res["test/acc"] - clean_acc) < 0.03


def test_reference_is_in_the_checkpoint_and_equals_a_recomputation(trained):
    _, dm, model = trained
    stored = model.distance_ref.clone()
    assert torch.isfinite(stored).all() and (stored > 0).all()
    model.update_distance_reference(dm.train_views)
    assert torch.allclose(model.distance_ref, stored, rtol=1e-5)


def test_the_weighting_follows_the_models_spec_when_it_is_replaced(trained):
    """mnp.tools.select infer scores each view-weighting variant on one checkpoint by replacing ``model.spec``: the
    weights must follow the new settings (power, quantile, mode), not the ones the model was built with."""
    _, dm, model = trained
    model.eval()
    spec, stored = model.spec, model.distance_ref.clone()
    noised = [
        dm.test_views[0].float(),
        3.0 * torch.randn(dm.test_views[1].shape, generator=torch.Generator().manual_seed(2)),
    ]
    try:
        with torch.no_grad():
            scores = model._attend_scores(noised)[1]
            power = spec.aggregation.view_weighting.power
            w1 = model._view_weights(scores)
            model.spec = spec.replace("aggregation.view_weighting", power=2 * power)
            w2 = model._view_weights(scores)
            assert torch.allclose(w2, w1**2), "weights at power 2p are the weights at p squared (relative, eq. 8′)"
            model.spec = spec.replace("aggregation.view_weighting", quantile=0.5)
            model.update_distance_reference(dm.train_views)
            assert (model.distance_ref < stored).all()  # the median distance is below the 0.99 quantile
            model.spec = spec.replace("aggregation.view_weighting", mode="none")
            assert model._view_weights(scores) is None
    finally:
        model.spec = spec
        model.distance_ref.copy_(stored)


def test_switch_errors_name_the_key(tmp_path):
    dm_cfg = compose_train(tmp_path, TWO_VIEWS)
    _, dm = build_datamodule(dm_cfg)
    for override, match in [
        ("model.aggregation.view_weighting.mode=kernel", "unknown model.aggregation.view_weighting.mode 'kernel'"),
        (
            "model.aggregation.view_weighting.quantile=1.5",
            r"model.aggregation.view_weighting.quantile must be in \(0, 1\], got 1.5",
        ),
        ("model.aggregation.view_weighting.power=0", "model.aggregation.view_weighting.power must be > 0, got 0"),
    ]:
        with pytest.raises(ValueError, match=match):
            build_model(compose_train(tmp_path, [*TWO_VIEWS, override]), dm)
    with pytest.raises(ValueError, match="view_weighting.mode=distance needs model.attention.similarity=rbf"):
        build_model(
            compose_train(tmp_path, [*TWO_VIEWS, "model.attention.similarity=dot", "model.warmup.epochs=0"]), dm
        )
