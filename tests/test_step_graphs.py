"""``accel.cuda_graph``: MNP's training step and DCM update replayed as CUDA graphs (mnp.model.step_graphs).

On a CPU the ``emulate`` mode runs the graph path's bookkeeping (static input buffers, one pair per
phase and batch size, a capturable fused Adam with tensor learning rates, Lightning's step count
around each replay, the DCM update replayed from ``on_train_batch_end``) with the eager functions in
place of the graphs; it must train exactly as the eager path. The graphs themselves are checked on a
GPU by benchmarks/device/graph_check.py (part of benchmarks/device/gpu_check.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from mnp_utils import flat_mnp

import mnp.model.step_graphs as step_graphs
from datamodules import TensorDataModule
from mnp.cli import accel
from mnp.cli.validate import ConfigError, check_accel
from mnp.model import MNP

pytestmark = pytest.mark.usefixtures("one_thread")

DIMS = (5, 7, 4)


def datamodule(batch_size=16):
    """70 training rows in batches of 16: four full batches and a short one of 6 per epoch."""
    rng = np.random.default_rng(0)
    y = np.arange(90) % 3
    views = [rng.normal(size=(90, d)) + y[:, None] for d in DIMS]
    return TensorDataModule(views, y, np.arange(70), np.arange(70, 90), batch_size=batch_size)


def build(**kw):
    base = dict(
        num_classes=3,
        view_dims=list(DIMS),
        d_e=16,
        memory_size=9,
        projection="linear",
        warmup_epochs=1,
        warmup_lr=1e-2,
        clip_norm=0.5,
        l2=1e-3,
        modality_mask=True,
        optim={"lr": 1e-2, "schedule": "piecewise", "milestones": [2], "values": [1e-2, 1e-3]},
    )
    base.update(kw)
    torch.manual_seed(0)
    return flat_mnp(**base)


def fit(graph, tmp_path, epochs=4, resume=None, ckpt=False, **kw):
    """Train a fresh MNP with ``cuda_graph=graph``; returns the model, the trainer and the replays made."""
    pl.seed_everything(0, verbose=False)
    model = build(**kw)
    model.cuda_graph = graph
    replays = []
    original = MNP.train_step

    def spy(self, views, y, opt, hooks=True):
        if not hooks:
            replays.append(int(y.shape[0]))
        return original(self, views, y, opt, hooks)

    trainer = pl.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=ckpt,
        default_root_dir=tmp_path,
        accelerator="cpu",
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MNP, "train_step", spy)
        trainer.fit(model, datamodule(), ckpt_path=resume)
    return model, trainer, replays


def assert_same_training(a, b, ta, tb):
    assert ta.global_step == tb.global_step
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name
    for oa, ob in zip(ta.optimizers, tb.optimizers):
        for ga, gb in zip(oa.param_groups, ob.param_groups):
            assert float(ga["lr"]) == float(gb["lr"])
        for p, q in zip(oa.state.values(), ob.state.values()):
            for k in ("exp_avg", "exp_avg_sq", "step"):
                assert torch.equal(p[k].to(q[k].dtype), q[k]), k
    assert tb.callback_metrics.keys() == ta.callback_metrics.keys()
    for k, v in tb.callback_metrics.items():
        if k.startswith("time/"):
            continue
        torch.testing.assert_close(ta.callback_metrics[k], v, rtol=0, atol=0, msg=k)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"memory_write": "before_step", "memory_update": "fifo"},
        {"memory_jstar": "same_class", "memory_update": "ce", "norm": "batch"},
    ],
    ids=["paper", "before_step_fifo", "same_class_ce_batchnorm"],
)
def test_emulated_graph_training_equals_eager_bit_for_bit(tmp_path, kw):
    """Warm-up, main phase, a schedule step and a short last batch: the same parameters, memory, optimiser
    states, learning rates, step count and logged metrics."""
    eager, te, none = fit(False, tmp_path / "e", **kw)
    graph, tg, replays = fit("emulate", tmp_path / "g", **kw)
    assert none == []
    steps = 4 * 5  # 4 epochs of 5 batches: one eager first step per (phase, batch size), replays for the rest
    assert sorted(set(replays)) == [6, 16] and len(replays) == steps - 4
    assert graph._step_graphs is None and graph.capturable  # freed at the end of the fit
    assert_same_training(graph, eager, tg, te)


def test_no_pair_keeps_an_autograd_graph_alive(tmp_path):
    """What a pair keeps of its step (the loss and logs it returns at every replay) holds no autograd graph:
    a kept graph keeps the parameters' AccumulateGrad nodes of the stream it was built on, and the next pair's
    eager first step (its own side stream on a GPU) accumulates into them across streams, the "AccumulateGrad
    node's stream does not match" warning of the H200 session (benchmarks/h200_9de9874/README.md)."""
    seen = []

    class Check(pl.Callback):
        def on_train_batch_start(self, trainer, model, batch, batch_idx):
            for pair in model._step_graphs.pairs.values():
                outputs = [pair.loss, *pair.logs.values()] if pair.loss is not None else []
                seen.extend(t.grad_fn is None and not t.requires_grad for t in outputs)

    pl.seed_everything(0, verbose=False)
    model = build()
    model.cuda_graph = "emulate"
    trainer = pl.Trainer(
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
        num_sanity_val_steps=0,
        limit_val_batches=0,
        callbacks=[Check()],
    )
    trainer.fit(model, datamodule())
    assert seen and all(seen)


def test_batch_shapes_beyond_the_limit_train_eagerly_and_the_same(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(step_graphs, "MAX_PAIRS", 1)  # the short last batch of each phase: eager
    eager, te, _ = fit(False, tmp_path / "e")
    graph, tg, replays = fit("emulate", tmp_path / "g")
    assert sorted(set(replays)) == [16] and len(replays) == 4 * 4 - 2
    assert "more than 1 batch shapes; the others train eagerly" in caplog.text
    assert_same_training(graph, eager, tg, te)


def test_a_resumed_emulated_run_equals_an_uninterrupted_eager_one(tmp_path):
    """Resuming re-makes the optimiser capturable from the checkpoint's state and captures anew."""
    fit("emulate", tmp_path / "g", epochs=2, ckpt=True)
    last = next((tmp_path / "g").rglob("*.ckpt"))
    graph, tg, _ = fit("emulate", tmp_path / "g2", epochs=4, resume=str(last))
    eager, te, _ = fit(False, tmp_path / "e", epochs=4)
    assert_same_training(graph, eager, tg, te)


def test_make_capturable_keeps_the_update_and_the_schedule_fills_the_tensor():
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([p], lr=0.1, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5**e)
    p.grad = torch.ones(3)
    opt.step()
    step_graphs.make_capturable(opt)
    lr = opt.param_groups[0]["lr"]
    assert opt.param_groups[0]["capturable"] and isinstance(lr, torch.Tensor) and lr.dtype == torch.float64
    sched.step()
    assert opt.param_groups[0]["lr"] is lr and float(lr) == pytest.approx(0.05)  # filled in place, not replaced
    from mnp.framework.optim import set_lr

    set_lr(opt.param_groups[0], 0.02)
    assert opt.param_groups[0]["lr"] is lr and float(lr) == pytest.approx(0.02)


def test_a_non_finite_loss_stops_an_emulated_run(tmp_path):
    class NaNFromEpoch2(MNP):
        def _training_loss(self, views, y):
            loss, logs = super()._training_loss(views, y)
            return (loss * float("nan") if self.current_epoch >= 2 else loss), logs

    pl.seed_everything(0, verbose=False)
    model = NaNFromEpoch2(
        3, list(DIMS), encoder={"d_e": 8, "projection": "linear"}, memory={"size": 6}, warmup={"epochs": 1}
    )
    model.cuda_graph, model.check_finite_every = "emulate", 3
    trainer = pl.Trainer(
        max_epochs=4,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
    )
    with pytest.raises(FloatingPointError, match="one of global steps"):
        trainer.fit(model, datamodule())
    assert all(torch.isfinite(p).all() for p in model.parameters())  # fused Adam skipped the bad steps


# ---------------------------------------------------------------------------- what can be captured
def fake_trainer(device="cpu", world_size=1, precision="32-true"):
    return SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device(device)), world_size=world_size, precision=precision
    )


def test_configure_sets_the_finite_check_period_and_the_switch():
    model = build()
    accel.configure(model, {"check_finite_every": "auto", "cuda_graph": "emulate"}, fake_trainer())
    assert model.check_finite_every == 1 and model.cuda_graph == "emulate"
    accel.configure(model, {"check_finite_every": "auto"}, fake_trainer("cuda"))
    assert model.check_finite_every == accel.GPU_FINITE_EVERY
    accel.configure(model, {"check_finite_every": 7}, fake_trainer("cuda"))
    assert model.check_finite_every == 7


@pytest.mark.parametrize(
    "model_kw, trainer_kw, accel_value, message",
    [
        ({}, {}, True, "needs a CUDA device, but the trainer runs on cpu"),
        ({"memory_update": "random"}, {"device": "cuda"}, True, "memory.update=random"),
        ({"optim": {"lr": 1e-3, "eps_placement": "keras"}}, {}, "emulate", "eps_placement=keras"),
        ({"fast": False}, {}, "emulate", "model.fast=false"),
        ({}, {"world_size": 2}, "emulate", "2 processes"),
        ({}, {"precision": "bf16-mixed"}, "emulate", "fp32 only"),
    ],
)
def test_configure_refuses_what_a_graph_cannot_hold_in_one_line(model_kw, trainer_kw, accel_value, message):
    model = build(**model_kw)
    with pytest.raises(ValueError, match=message) as err:
        accel.configure(model, {"cuda_graph": accel_value}, fake_trainer(**trainer_kw))
    assert "\n" not in str(err.value)


def test_configure_refuses_the_switch_for_a_baseline():
    from baselines.mlp import MLP

    with pytest.raises(ValueError, match="applies to MNP only"):
        accel.configure(MLP(3, list(DIMS)), {"cuda_graph": "emulate"}, fake_trainer())


@pytest.mark.parametrize(
    "bad, key",
    [
        ({"cuda_graph": "yes"}, "accel.cuda_graph"),
        ({"matmul_precision": "tf32"}, "accel.matmul_precision"),
        ({"check_finite_every": -1}, "accel.check_finite_every"),
        ({"check_finite_every": "often"}, "accel.check_finite_every"),
    ],
)
def test_validation_names_the_bad_accel_key(bad, key):
    with pytest.raises(ConfigError, match=key):
        check_accel(bad)


def test_matmul_precision_is_restored_after_the_run():
    before = torch.get_float32_matmul_precision()
    with accel.matmul_precision("medium"):
        assert torch.get_float32_matmul_precision() == "medium"
    assert torch.get_float32_matmul_precision() == before


def test_train_py_runs_with_the_emulated_graph(tmp_path):
    from mnp.cli.pipeline import train
    from tests.cfg_utils import compose_train

    cfg = compose_train(
        tmp_path,
        [
            "trainer.max_epochs=3",
            "model.warmup.epochs=1",
            "accel.cuda_graph=emulate",
            "callbacks.checkpoint.every_n_epochs=0",
            "eval.noise=false",
        ],
    )
    results = train(cfg)
    assert results["test/acc"] > 0.8  # the synthetic two moons
    assert results["accel/step"] == "cuda_graph_emulated"
