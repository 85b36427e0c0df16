"""MNP's optimised implementation (``fast=True``) against the straightforward one (``fast=False``):
foreach clipping and L2, fused Adam, cached context encodings at inference, partial-sort sparsemax,
float32 variances under bf16 autocast, torch.compile. Same math, so the same numbers."""

import copy
import dataclasses
import pickle

import pytest
import torch
from entmax import sparsemax
from mnp_utils import flat_mnp

from mnp.model import MNP
from mnp.model.attention import normalise, topk_hint
from mnp.model.training import SumOfSquares, clip_per_tensor

pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread is fastest on 2 shared cores


def data(n=40, k=3, dims=(5, 7), seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % k
    return [torch.randn(n, d, generator=g) + y[:, None].float() for d in dims], y


def pair(n=40, **kw):
    """Two MNPs with identical weights and memory (from n rows), one fast and one straightforward."""
    base = dict(
        num_classes=3,
        view_dims=[5, 7],
        d_e=16,
        memory_size=9,
        projection="linear",
        l2=1e-2,
        clip_norm=0.05,
        norm="batch",
        lengthscale_form="l",
    )
    base.update(kw)
    torch.manual_seed(0)
    fast = flat_mnp(**base, fast=True)
    ref = flat_mnp(**base, fast=False)
    views, y = data(n)
    fast.init_memory(views, y)
    ref.load_state_dict(fast.state_dict())
    ref.memory.attach(views, y)
    return fast, ref


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_foreach_clipping_equals_the_per_tensor_loop():
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(s)) for s in [(3, 4), (7,), (2, 2, 2), (5,)]]
    for p, scale in zip(ps, [10.0, 0.01, 1.0, 3.0]):
        p.grad = torch.randn_like(p) * scale
    ref = [p.grad.clone() for p in ps]
    for g in ref:
        g.mul_(0.5 / g.norm().clamp_min(0.5))
    ps.append(torch.nn.Parameter(torch.ones(2)))  # no gradient: skipped
    clip_per_tensor(ps, 0.5, fast=True)
    for p, r in zip(ps, ref):
        torch.testing.assert_close(p.grad, r, rtol=1e-6, atol=1e-7)
        assert p.grad.norm() <= 0.5 + 1e-6


def test_sum_of_squares_value_and_gradient_equal_the_naive_sum():
    torch.manual_seed(0)
    ws = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in [(4, 3), (6,), (2, 5)]]
    naive = sum(w.pow(2).sum() for w in ws)
    fast = SumOfSquares.apply(*ws)
    torch.testing.assert_close(fast, naive)
    g_naive = torch.autograd.grad(3.0 * naive, ws)
    g_fast = torch.autograd.grad(3.0 * fast, ws)
    for a, b in zip(g_fast, g_naive):
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(SumOfSquares.apply, tuple(ws))


@pytest.mark.parametrize("norm", ["batch", "layer"])
def test_fast_training_equals_the_straightforward_one_step_by_step(norm):
    """Same losses and gradients (after L2 and per-tensor clipping) over several steps, each followed
    by the same plain gradient step and the DCM update, so that both models walk the same states."""
    fast, ref = pair(norm=norm)
    views, y = data(seed=1)
    for step in range(4):
        outs = []
        for model in (fast, ref):
            torch.manual_seed(step)  # same Monte Carlo draws
            loss, _ = model.training_loss(views, y)
            model.zero_grad()
            loss.backward()
            clip_per_tensor(model.parameters(), model.spec.optim.clip_norm, model.spec.fast)
            outs.append((loss.detach(), grads(model)))
        torch.testing.assert_close(outs[0][0], outs[1][0], rtol=1e-5, atol=1e-6)
        assert outs[0][1].keys() == outs[1][1].keys()
        for name in outs[0][1]:
            torch.testing.assert_close(outs[0][1][name], outs[1][1][name], rtol=1e-4, atol=1e-7, msg=name)
        for model in (fast, ref):
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p.sub_(10.0 * outs[1][1][next(n for n, q in model.named_parameters() if q is p)])
            model.on_train_batch_end(None, None, step)
        for (name, a), b in zip(fast.state_dict().items(), ref.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_fused_adam_equals_the_per_tensor_adam():
    """The optimisers MNP builds (main and warm-up): fused when fast, the same updates."""
    fast, ref = pair(warmup_epochs=2, optim={"lr": 1e-2, "eps": 1e-7})
    (main_f, warm_f), (main_r, warm_r) = fast.configure_optimizers(), ref.configure_optimizers()
    for of, orf in ((main_f["optimizer"], main_r["optimizer"]), (warm_f["optimizer"], warm_r["optimizer"])):
        assert of.defaults["fused"] and not orf.defaults["fused"]
        g = torch.Generator().manual_seed(0)
        for _ in range(5):
            for pf, pr in zip(
                (p for grp in of.param_groups for p in grp["params"]),
                (p for grp in orf.param_groups for p in grp["params"]),
            ):
                pf.grad = torch.randn(pf.shape, generator=g)
                pr.grad = pf.grad.clone()
            of.step(), orf.step()
    for (name, a), b in zip(fast.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def predict(model, views, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.predict(views)


def test_cached_context_predictions_equal_fresh_ones_and_follow_every_change():
    fast, ref = pair()
    views, _ = data(n=12, seed=2)
    for m in (fast, ref):
        m.eval()
    first = predict(fast, views)
    assert fast.context_cache.entry is not None and ref.context_cache.entry is None  # the reference never caches
    again = predict(fast, views)  # served from the cache
    want = predict(ref, views)
    for a, b, c in zip(first, again, want):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)
    # a parameter changed in place (an optimiser step), a memory row replaced, a buffer changed:
    # every one invalidates the cache
    for change in (
        lambda m: m.encoders[0].enc_r.fc1.weight.mul_(1.5),
        lambda m: m.memory.rows(1)[0, 0].fill_(3.0),
        lambda m: m.encoders[1].enc_s.norm.norm.running_var.add_(0.5),
        lambda m: m.load_state_dict({k: v * 0.9 if v.is_floating_point() else v for k, v in m.state_dict().items()}),
    ):
        for m in (fast, ref):
            with torch.no_grad():
                change(m)
        for a, b in zip(predict(fast, views), predict(ref, views)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # training mode (BatchNorm batch statistics) and gradients never use the cache
    fast.train()
    assert fast.context_cache.entry is None
    torch.manual_seed(0)
    loss, _ = fast.training_loss(views, torch.arange(12) % 3)
    assert loss.requires_grad and fast.context_cache.entry is None


def test_a_fused_adam_step_in_eval_mode_invalidates_the_cache():
    """Fused Adam does not bump parameter versions: MNP's optimisers clear the cache after each step."""
    fast, ref = pair()
    views, y = data(n=12, seed=5)
    opt_f, opt_r = fast.configure_optimizers()["optimizer"], ref.configure_optimizers()["optimizer"]
    for m in (fast, ref):
        m.eval()
    predict(fast, views)
    assert fast.context_cache.entry is not None
    for m, opt in ((fast, opt_f), (ref, opt_r)):
        for p in m.parameters():
            p.grad = torch.full_like(p, 0.1)
        opt.step()
    assert fast.context_cache.entry is None
    for a, b in zip(predict(fast, views), predict(ref, views)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_memory_readiness_is_read_from_the_device_once_and_again_after_loading():
    fast, _ = pair()
    assert not fast.memory.needs_data() and fast.memory._seen_initialised
    fresh = MNP(**fast.hparams)
    assert fresh.memory.needs_data()
    fast.load_state_dict(fresh.state_dict())  # an uninitialised memory loaded over a ready one
    assert fast.memory.needs_data()
    fresh.load_state_dict(pair()[0].state_dict())
    assert not fresh.memory.needs_data()


def test_cache_is_not_used_for_a_resampled_context():
    fast, _ = pair(memory_update="random")
    fast.eval()
    predict(fast, data(n=6)[0])
    assert fast.context_cache.entry is None


def test_partial_sort_sparsemax_equals_the_full_sort_bit_for_bit():
    torch.manual_seed(0)
    scores = torch.exp(-torch.rand(3, 50, 400) * torch.rand(3, 50, 1) * 30)  # RBF-like, mixed supports
    g = torch.randn_like(scores)
    outs = []
    for k in (None, 4, 16, 64):
        x = scores.clone().requires_grad_()
        out = normalise(x, "sparsemax", k)
        (out * g).sum().backward()
        outs.append((out, x.grad))
    for out, grad in outs[1:]:
        assert torch.equal(out, outs[0][0]) and torch.equal(grad, outs[0][1])
    assert torch.equal(outs[0][0], sparsemax(scores, dim=-1))


def test_topk_hint_doubles_the_largest_support_and_falls_back_to_the_full_sort():
    attn = torch.zeros(2, 3, 1000)
    attn[..., :5] = 0.2
    attn[1, 2, :20] = 0.05
    assert topk_hint(attn) == 64  # support 20 -> 40 -> next power of two
    assert topk_hint(attn[..., :200]) is None  # 64 is not below 200 / 4


def test_fast_model_uses_the_hint_and_keeps_the_attention():
    fast, ref = pair(n=900, memory_size=600, lengthscale_init=3.0)  # N = 600, supports of a few dozen
    views, _ = data(n=30, seed=3)
    fast.eval(), ref.eval()
    with torch.no_grad():
        a_fast = fast._attend(views)[1]
        a_again = fast._attend(views)[1]  # now with a partial sort
        a_ref = ref._attend(views)[1]
    assert fast._sparsemax_k is not None and ref._sparsemax_k is None
    assert torch.equal(a_fast, a_again)
    torch.testing.assert_close(a_fast, a_ref)


def test_variances_and_attention_stay_float32_under_bf16_autocast():
    fast, _ = pair()
    views, _ = data(n=8)
    fast.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        _, attn, r_star, s_star, u, q = fast._attend(views)
        cached = fast._attend(views)
    assert attn.dtype == s_star.dtype == q.dtype == torch.float32
    assert cached[3].dtype == cached[5].dtype == torch.float32
    with torch.no_grad():
        _, _, _, s32, _, _ = fast._attend(views)  # a different autocast state: not served from the cache
    torch.testing.assert_close(s32, s_star, rtol=0.05, atol=0.01)


def test_model_with_a_cache_still_pickles_and_deep_copies():
    fast, _ = pair()
    fast.eval()
    predict(fast, data(n=5)[0])
    for clone in (copy.deepcopy(fast), pickle.loads(pickle.dumps(fast))):
        assert clone.context_cache.entry is None
        for a, b in zip(predict(clone, data(n=5)[0]), predict(fast, data(n=5)[0])):
            torch.testing.assert_close(a, b)


@pytest.mark.slow
def test_compiled_decoder_and_nll_equal_eager(monkeypatch):
    import torch._inductor.config as inductor

    monkeypatch.setattr(inductor, "fallback_random", True)  # the eager random stream, so the same draws
    fast, _ = pair()
    compiled = copy.deepcopy(fast)
    compiled.spec = dataclasses.replace(compiled.spec, compile=True)
    views, y = data(seed=4)
    results = []
    for m in (fast, compiled):
        torch.manual_seed(0)
        loss, _ = m.training_loss(views, y)
        loss.backward()
        results.append((loss.detach(), grads(m)))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-6)
    for name, g in results[0][1].items():
        torch.testing.assert_close(g, results[1][1][name], rtol=1e-4, atol=1e-6)


def test_stacks_first_built_in_inference_mode_still_train():
    """A test pass under inference_mode before any training step (the benchmark on a GPU: .to(device)
    invalidates the stacks, then a test pass rebuilds them) must leave normal tensors behind: the next
    training step backpropagates and every parameter gets its gradient, as in the straightforward model."""
    fast, ref = pair()
    views, y = data(seed=1)
    for model in (fast, ref):
        model.eval()
        with torch.inference_mode():
            model.predict(views)
        model.train()
    assert fast.encoder_stacks.built is not None and fast.encoder_stacks.built.stacks, "the test pass built no stacks"
    assert not any(s.leaf.is_inference() for s in fast.encoder_stacks.built.stacks.values())
    outs = []
    for model in (fast, ref):
        torch.manual_seed(0)
        loss, _ = model.training_loss(views, y)
        model.zero_grad()
        loss.backward()
        outs.append(grads(model))
    assert outs[0].keys() == outs[1].keys()
    for name in outs[0]:
        torch.testing.assert_close(outs[0][name], outs[1][name], rtol=1e-4, atol=1e-7, msg=name)
