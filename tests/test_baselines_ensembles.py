"""Deep ensembles (early and late fusion), batched layers and MC Dropout."""

import math

import torch
from torch import nn

from baselines.batched import BatchedLinear, pad_views
from baselines.deep_ensemble import DeepEnsemble, member_variance
from baselines.mcd import MCDropout
from mnp.eval import metrics

DIMS = [6, 3, 4]


def make_views(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, d, generator=g) for d in DIMS]


def test_batched_linear_matches_separate_layers_and_init_per_member():
    torch.manual_seed(0)
    layer = BatchedLinear(3, 6, 5, fan_in=[6, 3, 4])
    for e, f in enumerate([6, 3, 4]):
        bound = 1 / math.sqrt(f)
        assert layer.weight[e].abs().max() <= bound and layer.bias[e].abs().max() <= bound
        assert (layer.weight[e, f:] == 0).all()
    x = pad_views(make_views())
    out = layer(x)
    for e, v in enumerate(make_views()):
        ref = v @ layer.weight[e, : v.shape[1]] + layer.bias[e]
        torch.testing.assert_close(out[e], ref)


def test_ensemble_members_differ_and_average_is_returned():
    torch.manual_seed(0)
    for fusion, members, uncertainty in [("early", 5, "variance"), ("late", len(DIMS), "entropy")]:
        model = DeepEnsemble(4, DIMS, fusion=fusion, hidden=(16,), uncertainty=uncertainty)
        model.eval()
        first = model.net.net[0].weight
        assert first.shape[0] == members
        for a in range(members):
            for b in range(a + 1, members):
                assert not torch.allclose(first[a], first[b])  # own initialisation
        views = make_views()
        probs, unc = model.predict(views)
        assert probs.shape == (members, 8, 4)
        for a in range(members):
            for b in range(a + 1, members):
                assert not torch.allclose(probs[a], probs[b])  # different predictions
        torch.testing.assert_close(probs, model.logits(views).softmax(-1))
        expected_unc = (
            probs.var(0, unbiased=False).sum(-1) if uncertainty == "variance" else metrics.entropy(probs.mean(0))
        )
        torch.testing.assert_close(unc, expected_unc)
        scores = model.extra_scores(probs)
        torch.testing.assert_close(scores["variance"], member_variance(probs))
        torch.testing.assert_close(scores["entropy"], metrics.entropy(probs.mean(0)))
        # the routine reports the members' average
        p_mean, _ = model.predict_tensors(views)
        torch.testing.assert_close(p_mean, probs.mean(0))


def test_late_fusion_member_sees_only_its_view():
    torch.manual_seed(0)
    model = DeepEnsemble(4, DIMS, fusion="late", hidden=(16,))
    views = make_views()
    changed = list(views)
    changed[2] = changed[2] * 3
    a, b = model.logits(views), model.logits(changed)
    torch.testing.assert_close(a[:2], b[:2])
    assert not torch.allclose(a[2], b[2])


def test_members_train_independently():
    torch.manual_seed(0)
    model = DeepEnsemble(4, DIMS, members=3, hidden=(16,))
    views, y = make_views(), torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    loss, _ = model.training_loss(views, y)
    loss.backward()
    joint = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    nn.functional.cross_entropy(model.logits(views)[1], y).backward()
    for g_joint, p in zip(joint, model.parameters()):
        torch.testing.assert_close(g_joint[1], p.grad[1])  # member 1's gradient is its own loss's
        assert (p.grad[[0, 2]] == 0).all()


def test_mc_dropout_stochastic_at_test_and_deterministic_when_off():
    torch.manual_seed(0)
    model = MCDropout(4, DIMS, hidden=(32, 16), dropout=0.2, mc_samples=100)
    model.eval()
    views = make_views()
    p1, u1 = model.predict(views)
    p2, _ = model.predict(views)
    assert p1.shape == (100, 8, 4)
    assert not torch.allclose(p1[0], p1[1]) and not torch.allclose(p1, p2)
    torch.testing.assert_close(u1, metrics.entropy(p1.mean(0)))
    model.mc_samples = 0
    d1, _ = model.predict(views)
    d2, _ = model.predict(views)
    assert d1.shape == (1, 8, 4)
    torch.testing.assert_close(d1, d2)
    torch.testing.assert_close(d1[0], model.net(torch.cat(views, -1)).softmax(-1))  # dropout off = eval forward
    # the samples are independent dropout masks at rate p on the hidden units, survivors scaled by 1/(1 − p)
    seen = []
    hook = model.net[3].register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    x = torch.cat(views, -1)
    model.sample_logits(x, 500)
    hook.remove()
    h = model.net[1](model.net[0](x))  # deterministic first block, (B, 32)
    dropped = seen[0]  # (S, B, 32)
    alive = h > 0
    zero_frac = (dropped[:, alive] == 0).float().mean().item()
    assert abs(zero_frac - 0.2) < 0.01
    kept = dropped[:, alive] != 0
    torch.testing.assert_close(dropped[:, alive][kept], (h[alive] / 0.8).expand(500, -1)[kept])
    assert not torch.equal(dropped[0] == 0, dropped[1] == 0)
