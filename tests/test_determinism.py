"""Determinism of MNP runs: the same seed on the same device gives identical metrics.json values and
predictions; different seeds give different initial weights and different context memories."""

import json

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from cfg_utils import TINY_MNP, compose_train

from mnp.cli.builders import build_datamodule, build_model
from mnp.cli.pipeline import train

MNP_RUN = [*TINY_MNP, "trainer.max_epochs=3", "ckpt_path=null"]


pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread is fastest on 2 shared cores


def test_same_seed_gives_identical_metrics_json_and_predictions(tmp_path):
    for run in ("a", "b"):
        train(compose_train(tmp_path / run, [*MNP_RUN, "seed=7"]))
    a, b = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("a", "b"))
    assert a.keys() == b.keys() and {"test/acc", "test/nll", "noise/acc_mean", "noise/acc@0.1"} <= a.keys()
    values = {k: v for k, v in a.items() if not k.startswith("time/")}
    assert values == {k: v for k, v in b.items() if not k.startswith("time/")}
    assert a["epochs"] == 3 and np.isfinite(a["test/nll"])
    pa, pb = np.load(tmp_path / "a" / "predictions.npz"), np.load(tmp_path / "b" / "predictions.npz")
    assert pa.files == pb.files and all(np.array_equal(pa[k], pb[k]) for k in pa.files)
    ma, mb = (
        torch.load(tmp_path / run / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"] for run in ("a", "b")
    )
    assert all(torch.equal(ma[k], mb[k]) for k in ma)  # weights and the trained context memory


def initial_state(tmp_path, seed):
    """The model as the pipeline builds it for ``seed``, on data fixed by ``dataset.seed=0``."""
    cfg = compose_train(tmp_path, [*MNP_RUN, f"seed={seed}", "dataset.seed=0"])
    pl.seed_everything(seed, verbose=False)
    _, dm = build_datamodule(cfg)
    _, model = build_model(cfg, dm)
    model.init_memory(dm.train_views, dm.train_y)  # what on_fit_start does
    return model.state_dict(), dm


def test_different_seeds_give_different_weights_and_context_memories(tmp_path):
    s0, dm = initial_state(tmp_path, 0)
    s0_again, _ = initial_state(tmp_path, 0)
    s1, _ = initial_state(tmp_path, 1)
    assert all(torch.equal(s0[k], s0_again[k]) for k in s0)
    weights = [k for k in s0 if k.endswith(".weight") and s0[k].dim() == 2]  # Glorot-initialised matrices
    assert len(weights) > 10 and all(not torch.equal(s0[k], s1[k]) for k in weights)
    for m in range(2):
        mem0, mem1 = s0[f"memory.x{m}"], s1[f"memory.x{m}"]
        assert not torch.equal(mem0, mem1)
        # both are genuine class-balanced draws from the same training set: row k holds class-k samples
        for mem in (mem0, mem1):
            for k in range(2):
                train_k = dm.train_views[m][dm.train_y == k]
                assert all((row == train_k).all(1).any() for row in mem[k])
        ids0 = {tuple(r.tolist()) for r in mem0.flatten(0, 1)}
        ids1 = {tuple(r.tolist()) for r in mem1.flatten(0, 1)}
        assert len(ids0 & ids1) < len(ids0) // 2  # mostly different samples, not a reordering


@pytest.mark.slow
def test_resumed_mnp_run_equals_the_uninterrupted_one(tmp_path):
    """Stop after the warm-up and one main epoch, resume from last.ckpt: the same metrics as one straight
    run. The learning rate drops exactly at the resume point (piecewise schedule, milestone 1), where a
    schedule restored one step behind would repeat the old rate."""
    run = [
        *MNP_RUN,
        "seed=3",
        "model.optim.schedule=piecewise",
        "model.optim.milestones=[1]",
        "model.optim.values=[1e-3,1e-5]",
        "trainer.max_epochs=4",
    ]
    straight = train(compose_train(tmp_path / "straight", run))
    train(compose_train(tmp_path / "resumed", [*run, "trainer.max_epochs=2", "test=false"]))
    resumed = train(compose_train(tmp_path / "resumed", [*run, "ckpt_path=last"]))
    assert resumed["epochs"] == straight["epochs"] == 4
    keys = [k for k in straight if not k.startswith("time/")]
    assert {k: resumed[k] for k in keys} == {k: straight[k] for k in keys}
