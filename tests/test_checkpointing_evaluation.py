"""Evaluation determinism: train-then-test, the same command re-run after a crash during testing, a run stopped
and resumed, and evaluate.py on the checkpoint give the same numbers, for every model; the models that sample in
predict test from their own generator (the checkpoints themselves: tests/test_checkpointing.py)."""

import shutil

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from cfg_utils import ROOT, TINY_MNP, compose_train
from test_checkpointing import eval_cfg

from mnp.cli.builders import build_datamodule, build_model, eval_protocol
from mnp.cli.pipeline import evaluate, train

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL_MNP = [*TINY_MNP, "seed=4"]


# ---------------------------------------------------------------------------- 7: evaluation determinism
def test_test_numbers_do_not_depend_on_what_the_process_did_before(tmp_path):
    """Train-then-test, the same command re-run after a crash during testing (resumes at the end and only
    tests), a run stopped and resumed, and evaluate.py on the checkpoint: the same numbers and predictions."""

    def run(name, *extra):
        return train(compose_train(tmp_path / name, [*SMALL_MNP, "trainer.max_epochs=3", *extra]))

    a = run("a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for f in ("metrics.json", "predictions.npz"):
        (tmp_path / "b" / f).unlink()
    b = run("b")
    run("c", "trainer.max_epochs=2", "test=false")
    c = run("c")
    e = evaluate(eval_cfg(tmp_path / "a" / "checkpoints" / "last.ckpt", tmp_path / "e"))
    keys = [k for k in a if k.startswith(("test/", "noise/"))]
    assert "noise/acc@0.1" in keys and a["epochs"] == 3
    for other in (b, c, e):
        assert {k: other[k] for k in keys} == {k: a[k] for k in keys}
    pa = np.load(tmp_path / "a" / "predictions.npz")
    for other in ("b", "c", "e"):
        po = np.load(tmp_path / other / "predictions.npz")
        assert all(np.array_equal(pa[k], po[k]) for k in pa.files)


@pytest.mark.parametrize("model", sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml")))
def test_evaluate_reproduces_train_then_test_for_every_model(tmp_path, model):
    """Every model's checkpoint loads with weights_only=True (nothing is allow-listed), and evaluate.py gives
    the numbers train-then-test gave, for the models that sample in predict too."""
    run, warmup = tmp_path / "run", ["model.warmup.epochs=1"] if model.startswith("mnp") else []
    res = train(
        compose_train(
            run,
            [
                f"model={model}",
                *warmup,
                "dataset.num_views=2",
                "dataset.n_train=120",
                "dataset.n_test=60",
                "eval.noise_levels=[1.0]",
                "trainer.max_epochs=2",
            ],
        )
    )
    ev = evaluate(eval_cfg(run / "checkpoints" / "last.ckpt", tmp_path / "eval"))
    keys = [k for k in res if k.startswith(("test/", "noise/"))]
    assert "noise/acc@1" in keys and {k: ev[k] for k in keys} == {k: res[k] for k in keys}


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mnp", "mcd", "mgp", "etp"])
def test_sampling_models_test_from_their_own_generator(tmp_path, model):
    """Every model that samples in predict: the test results are the same whatever state the global RNG is
    in, and change with the run's seed (so the sampling is really there and seeded)."""
    cfg = compose_train(
        tmp_path,
        [
            f"model={model}",
            "dataset.num_views=2",
            "dataset.n_train=120",
            "dataset.n_test=60",
            "eval.noise_levels=[1.0]",
            "seed=0",
        ],
    )
    _, dm = build_datamodule(cfg)
    _, m = build_model(cfg, dm)
    pl.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    ).fit(m, datamodule=dm)

    def tested(global_seed, run_seed=0):
        cfg.seed = run_seed
        m.configure_evaluation(eval_protocol(cfg))
        torch.manual_seed(global_seed)
        trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.test(m, datamodule=dm, verbose=False)
        return {k: v for k, v in m.test_results.items() if not k.startswith("time/")}, m.test_arrays["test/probs"]

    (r1, p1), (r2, p2), (_, p3) = tested(1), tested(2), tested(1, run_seed=1)
    assert r1 == r2 and np.array_equal(p1, p2)
    assert not np.array_equal(p1, p3)
