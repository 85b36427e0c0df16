"""MNP's training step as one CUDA graph needs it: no host syncs, no graph breaks, few ops
(mnp.tools.bench.step_metrics), the same numbers as the eager step before (tests/data/step_golden.pt), batched
parameters that behave as the modules' own (mnp.model.stacked), and the fields in the benchmark's JSON."""

import copy
import json
import math
import pickle
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from mnp_utils import flat_mnp

from mnp.model import MNP
from mnp.model.stacked import ParamStack
from mnp.tools.bench import bench, bench_cases, step_metrics

sys.path.insert(0, str(Path(__file__).parent))
from step_golden import BASE, CASES, GOLDEN, STEPS, run, unflatten  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HANDWRITTEN = (240, 76, 216, 47, 64, 6), 10  # view widths, classes


pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread is fastest on 2 shared cores


def handwritten_batch(n_train=300, batch=200, seed=0):
    dims, k = HANDWRITTEN
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n_train) % k
    views = [torch.randn(n_train, d, generator=g) + y[:, None].float() for d in dims]
    return views, y, [v[:batch] for v in views], y[:batch]


def handwritten_mnp(**extra):
    """MNP as conf/model_dataset/mnp_handwritten.yaml builds it (main stage), memory filled, main Adam."""
    dims, k = HANDWRITTEN
    torch.manual_seed(0)
    model = bench_cases.build_model("mnp", "handwritten", k, dims, extra)
    train_views, train_y, views, y = handwritten_batch()
    model.init_memory(train_views, train_y)
    model.capturable = True
    return model, bench_cases.first_optimizer(model), views, y


# ---------------------------------------------------------------------------- host syncs, ops, graph breaks
def test_handwritten_step_has_no_host_sync_and_a_third_of_the_ops_of_before():
    model, opt, views, y = handwritten_mnp()
    out = step_metrics.measure_step(model, opt, views, y, explain=False)
    assert out["host_syncs_per_train_step"] == 0, out["host_sync_ops"]
    assert out["tensors_from_python_per_train_step"] == 0
    before = json.loads((ROOT / "benchmarks/step_metrics_before.json").read_text())
    was = next(c["ops_per_train_step"] for c in before["cases"] if c["dataset"] == "handwritten")
    assert out["ops_per_train_step"] <= was // 3, (out["ops_per_train_step"], was)


@pytest.mark.slow
def test_handwritten_forward_losses_and_memory_update_trace_as_one_graph():
    model, opt, views, y = handwritten_mnp(d_e=32)  # the same graph as d_e=512, traced faster
    step_metrics.step_function(model, opt, views, y)()  # eager warm-up: stacks, memory flag
    out = step_metrics.graph_breaks(step_metrics.loss_function(model, views, y))
    assert out["graph_breaks"] == 0 and out["graph_count"] == 1, out["graph_break_reasons"]


@pytest.mark.parametrize(
    "switches",
    [
        dict(memory_jstar="same_class", memory_update="ce"),
        dict(memory_update="fifo", memory_trainable=True, memory_init="uniform", memory_write="before_step"),
        dict(modality_mask=True, norm="batch", prior="shared", merge="sum", amplitude=True),
        dict(projection="none", similarity="dot", attention_norm="softmax", aggregation="concat"),
        dict(memory_update="random", lengthscale_form="l2", lengthscale_param="exp"),
    ],
)
def test_every_memory_rule_and_switch_steps_without_host_syncs(switches):
    base = dict(
        num_classes=4,
        view_dims=[7, 5, 3],
        d_e=8,
        memory_size=12,
        projection="linear",
        clip_norm=0.1,
        l2=1e-3,
        lengthscale_form="l",
    )
    torch.manual_seed(0)
    model = flat_mnp(**{**base, **switches})
    g = torch.Generator().manual_seed(0)
    y = torch.arange(40) % 4
    views = [torch.randn(40, d, generator=g) + y[:, None].float() for d in (7, 5, 3)]
    model.init_memory(views, y) if model.memory.needs_data() else None
    model.capturable = True
    out = step_metrics.measure_step(
        model, bench_cases.first_optimizer(model), [v[:16] for v in views], y[:16], explain=False
    )
    assert out["host_syncs_per_train_step"] == 0, out["host_sync_ops"]
    assert out["tensors_from_python_per_train_step"] == 0


def test_sync_counter_sees_item_masks_and_device_reads():
    x = torch.randn(10)
    with step_metrics.StepOps() as mode:
        x.sum().item()
        x[x > 0]
        x.nonzero()
        bool(x.max() > 0)
        y = x.clone()
        y[x > 0] = 0.0
        torch.where(x > 0, x, 0.0)  # static shape: no sync
    assert mode.syncs == {
        "aten::_local_scalar_dense": 2,
        "aten::index (boolean mask)": 1,
        "aten::nonzero": 1,
        "aten::index_put_ (boolean mask)": 1,
    }
    assert mode.from_python == 1  # the 0.0 written through the mask


# ---------------------------------------------------------------------------- the same numbers as before
def new_step(model, opt, views, y):
    model.capturable = True
    loss, _ = model.train_step(views, y, opt)
    model.update_context_memory()  # on_train_batch_end
    return loss.detach()


@pytest.mark.parametrize("name", list(CASES))
def test_train_step_equals_the_eager_step_of_before(name):
    """Same seed: the same losses, the same first gradients (after clipping) and the same state after three
    steps as the eager step of 5aef3e4. Adam moves a parameter by about lr per step in the sign of its
    gradient, so gradients that are rounding noise (a bias before a batch norm has none in exact arithmetic)
    may move apart by 2·lr per step; the configuration without batch norm must agree closely. The file was written
    on another machine, so every comparison allows float32 rounding (a summation order of another SIMD width)."""
    golden = torch.load(GOLDEN)[name]
    lr = {**BASE, **CASES[name]}["optim"]["lr"]
    for step_fn in (new_step, None):  # train_step as Lightning calls it, and the old sequence of calls
        got = run(name, step_fn) if step_fn else run(name)
        # losses of order 1 summed over a batch in float32: rounding of another order is ~1e-7 relative; 1e-5 is
        # ~100 ulps, far below a changed term of the loss (1e-3 or more)
        torch.testing.assert_close(got["losses"], golden["losses"], rtol=1e-5, atol=1e-6)
        grads, want = unflatten(got, "grads"), unflatten(golden, "grads")
        assert grads.keys() == want.keys()
        for k in want:  # a gradient is a longer float32 sum (back through the sparsemax and the batch): 1e-4 relative
            torch.testing.assert_close(grads[k], want[k], rtol=1e-4, atol=1e-7, msg=k)
        state, want = unflatten(got), unflatten(golden)
        assert state.keys() == want.keys()
        close = name == "handwritten_like"
        # parameters after three Adam steps, and the memory (rows of torch.randn data, whose vectorised path differs
        # per CPU): 1e-5 relative is ~100 ulps; without batch norm, rounding noise cannot flip an update's sign
        for k in want:
            tol = dict(rtol=1e-5, atol=1e-6) if close else dict(rtol=0.0, atol=2 * lr * STEPS)
            torch.testing.assert_close(state[k], want[k], **tol, msg=k)


def test_a_non_finite_loss_stops_training_at_the_periodic_read(tmp_path):
    import numpy as np

    from datamodules import TensorDataModule

    class NaNFromEpoch1(MNP):
        def _training_loss(self, views, y):
            loss, logs = super()._training_loss(views, y)
            return (loss * float("nan") if self.current_epoch >= 1 else loss), logs

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 20)
    views = [rng.normal(size=(60, d)) + y[:, None] for d in (4, 5)]
    dm = TensorDataModule(views, y, np.arange(0, 60, 2), np.arange(1, 60, 2), batch_size=10)  # 3 steps an epoch
    for every, match in ((1, r"\(nan\) at epoch 1, global step 3;"), (2, r"at epoch 1, one of global steps 3\.\.4;")):
        model = NaNFromEpoch1(3, [4, 5], encoder={"d_e": 8}, memory={"size": 6})
        model.check_finite_every = every
        trainer = pl.Trainer(
            max_epochs=3,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=tmp_path,
        )
        with pytest.raises(FloatingPointError, match=match):
            trainer.fit(model, dm)


# ---------------------------------------------------------------------------- batched parameters
def stacked_pair(norm="layer"):
    """A fast MNP whose encoders and projection biases run batched, and its straightforward twin."""
    kw = dict(num_classes=3, view_dims=[6, 4, 5], d_e=8, memory_size=6, projection="linear", l2=1e-3, norm=norm)
    torch.manual_seed(0)
    fast = flat_mnp(**kw)
    ref = flat_mnp(**kw, fast=False)
    g = torch.Generator().manual_seed(1)
    y = torch.arange(30) % 3
    views = [torch.randn(30, d, generator=g) for d in (6, 4, 5)]
    fast.init_memory(views, y)
    ref.load_state_dict(fast.state_dict())
    return fast, ref, [v[:12] for v in views], y[:12]


def loss_and_grads(model, views, y, seed=0):
    torch.manual_seed(seed)
    loss, _ = model.training_loss(views, y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    model._dcm_batch = None
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_training(a, b, views, y):
    la, ga = loss_and_grads(a, views, y)
    lb, gb = loss_and_grads(b, views, y)
    torch.testing.assert_close(la, lb)
    assert ga.keys() == gb.keys()
    for k in ga:
        torch.testing.assert_close(ga[k], gb[k], rtol=1e-4, atol=1e-7, msg=k)
    for (k, x), z in zip(a.state_dict().items(), b.state_dict().values()):  # batch norms' running statistics
        torch.testing.assert_close(x, z, rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_stacked_parameters_alias_the_modules_and_get_their_own_gradients(norm):
    fast, ref, views, y = stacked_pair(norm)
    assert fast.encoder_stacks.get() is not None and fast.similarity.stacked_lengthscales() is not None
    leaf = fast.encoder_stacks.get()["fc1.weight"]
    w = fast.encoders[1].enc_s.fc1.weight
    assert w.data_ptr() == leaf[1 * 4 + 2].data_ptr()  # modality 1, roles (r, u, s, q): s is third
    assert_same_training(fast, ref, views, y)
    assert leaf.grad is None  # handed out to the parameters
    with torch.no_grad():  # an in-place edit of a module's parameter is what the batched forward reads
        fast.encoders[0].enc_q.fc2.weight.mul_(1.5), ref.encoders[0].enc_q.fc2.weight.mul_(1.5)
    assert_same_training(fast, ref, views, y)


def test_gradients_accumulate_over_two_backward_passes_as_autograd_does():
    fast, ref, views, y = stacked_pair()
    for model in (fast, ref):
        model.zero_grad(set_to_none=True)
        for seed in (0, 1):
            torch.manual_seed(seed)
            model.training_loss(views, y)[0].backward()
    for (name, p), q in zip(fast.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-7, msg=name)


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_stacks_rebuild_after_moving_copying_pickling_and_loading(norm):
    fast, ref, views, y = stacked_pair(norm)
    assert_same_training(fast, ref, views, y)  # stacks built, one batch in the running statistics
    for clone in (copy.deepcopy(fast), pickle.loads(pickle.dumps(fast))):
        assert_same_training(clone, copy.deepcopy(ref), views, y)
    fast.double().float()  # new data for every parameter, new buffers: the stacks are stale and rebuilt
    assert_same_training(fast, ref, views, y)
    fast.eval(), ref.eval()
    with torch.no_grad():
        torch.manual_seed(0)
        a = fast.predict(views)[0]
        torch.manual_seed(0)
        torch.testing.assert_close(a, ref.predict(views)[0], rtol=1e-5, atol=1e-6)
    fast.train(), ref.train()
    fresh = MNP(**{k: v for k, v in fast.hparams.items()})
    fresh.load_state_dict(fast.state_dict())
    fresh.memory.attach(views, y)
    assert_same_training(fresh, ref, views, y)


def test_an_optimizer_step_on_the_parameters_moves_the_stack():
    fast, ref, views, y = stacked_pair()
    opt = bench_cases.first_optimizer(fast)
    fast.train_step(views, y, opt)
    leaf = fast.encoder_stacks.get()["fc2.bias"]
    assert torch.equal(leaf.detach()[5], fast.encoders[1].enc_u.fc2.bias.detach())


def test_param_stack_checks_its_parameters():
    with pytest.raises(ValueError, match="one shape"):
        ParamStack([torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))])
    ps = [torch.nn.Parameter(torch.full((2,), float(i))) for i in range(3)]
    stack = ParamStack(ps)
    assert stack.valid() and torch.equal(stack.leaf.detach(), torch.tensor([[0.0, 0], [1, 1], [2, 2]]))
    ps[1].data = ps[1].data.clone()
    assert stack.valid()  # only the ends are checked: a moved model moves every parameter
    ps[0].data = ps[0].data.clone()
    assert not stack.valid()


# ---------------------------------------------------------------------------- the benchmark's JSON
@pytest.mark.slow
def test_bench_quick_json_has_the_step_metrics(tmp_path, monkeypatch):
    monkeypatch.setitem(bench_cases.SHAPES, "hmdb", ((6, 4), 3, 500))  # hmdb's configs, tiny data
    out = tmp_path / "bench.json"
    bench.main(
        [
            "--quick",
            "--dataset",
            "hmdb",
            "--models",
            "mnp",
            "--json",
            str(out),
            "--repeats",
            "1",
            "--set",
            "mnp.d_e=16",
            "--set",
            "mnp.memory_size=12",
        ]
    )
    case = json.loads(out.read_text())["cases"][0]
    assert case["model"] == "mnp" and case["capturable"]
    assert case["ops_per_train_step"] > 0 and case["backward_ops_per_train_step"] > 0
    assert case["host_syncs_per_train_step"] == 0 and case["host_sync_ops"] == {}
    assert case["graph_breaks"] == 0 and case["graph_breaks_whole_step"] >= 1
    assert isinstance(case["graph_break_reasons_whole_step"], dict)
    assert math.isfinite(case["train_epoch_s"])


def test_docs_show_the_committed_before_and_after():
    before, after = (
        json.loads((ROOT / "benchmarks" / f).read_text()) for f in ("step_metrics_before.json", "step_metrics.json")
    )
    table = step_metrics.comparison_table(before, after)
    assert table in (ROOT / "docs/gpu.md").read_text(), (
        "docs/gpu.md is out of date: python -m mnp.tools.bench.step_metrics"
    )
    hw = next(c for c in after["cases"] if c["dataset"] == "handwritten")
    was = next(c for c in before["cases"] if c["dataset"] == "handwritten")
    assert hw["host_syncs_per_train_step"] == 0 and hw["graph_breaks"] == 0
    assert hw["ops_per_train_step"] <= was["ops_per_train_step"] // 3
