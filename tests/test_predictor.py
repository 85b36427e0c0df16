"""``mnp.load(run)``: a trained run predicts on raw rows exactly as evaluate.py does, without the data file."""

import logging

import numpy as np
import pytest
import torch
from cfg_utils import compose_train
from omegaconf import OmegaConf
from sklearn.datasets import load_digits

import mnp
from mnp.cli.pipeline import evaluate, train
from mnp.runs.checkpointing import PREP_KEY, load_checkpoint


def digits_file(path):
    """sklearn digits as two 32-column views, 1-based labels (the file's labels are not the model's), a fixed split,
    and raw pixel values 0..16 (unscaled: the run's standard scaling must be applied to predict)."""
    x, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(y))
    np.savez(path, x1=x[:, :32], x2=x[:, 32:], y=y + 1, train_idx=np.sort(order[:1400]), test_idx=np.sort(order[1400:]))
    return x, y + 1, np.sort(order[1400:])


def evaluated(run_dir):
    """evaluate.py's predictions.npz of the run's last checkpoint."""
    out = run_dir / "eval"
    evaluate(
        OmegaConf.create(
            {
                "ckpt_path": str(run_dir / "checkpoints" / "last.ckpt"),
                "output_dir": str(out),
                "data_dir": None,
                "eval": {"noise": False, "missing": False},
                "trainer": {"accelerator": "cpu", "devices": 1},
            }
        )
    )
    return np.load(out / "predictions.npz")


@pytest.mark.parametrize(
    "model, extra",
    [
        ("mcd", ["model.mc_samples=10"]),  # MC dropout and MNP sample at test time
        ("mnp", ["model.encoder.d_e=32", "model.memory.size=50", "model.warmup.epochs=0"]),
        ("mlp", ["dataset.scale_test_separately=true"]),  # the official protocol: test rows scaled on their own
    ],
)
def test_load_predicts_raw_rows_as_evaluate_does(tmp_path, model, extra, one_thread):
    data = tmp_path / "digits.npz"
    x, y, test_idx = digits_file(data)
    run = tmp_path / "run"
    train(
        compose_train(
            run,
            [
                f"model={model}",
                "dataset=custom",
                f"dataset.path={data}",
                "dataset.scaling=standard",
                "+dataset.eval_batch_size=150",
                "trainer.max_epochs=3",
                "eval.noise=false",
                "eval.missing=false",
                "seed=1",
                *extra,
            ],
        )
    )
    ref = evaluated(run)
    data.unlink()  # the checkpoint carries the preprocessing: no data file is needed to predict
    predictor = mnp.load(run)
    probs, unc = predictor.predict_proba([x[test_idx, :32], x[test_idx, 32:]], return_uncertainty=True)
    np.testing.assert_array_equal(probs, ref["test/probs"])
    np.testing.assert_array_equal(unc, ref["test/uncertainty"])
    labels = predictor.predict({"x2": x[test_idx, 32:], "x1": x[test_idx, :32]})  # by the file's view names
    np.testing.assert_array_equal(labels, ref["test/probs"].argmax(1) + 1)  # the file's 1-based labels
    assert (labels == y[test_idx]).mean() > 0.3  # 3 epochs; chance is 0.1 (and raw rows unscaled gave it)


def test_a_checkpoint_without_the_preprocessing_refits_it_from_the_data_file(tmp_path, caplog, one_thread):
    data = tmp_path / "digits.npz"
    x, _, test_idx = digits_file(data)
    run = tmp_path / "run"
    train(
        compose_train(
            run,
            [
                "model=mlp",
                "dataset=custom",
                f"dataset.path={data}",
                "dataset.scaling=standard",
                "trainer.max_epochs=2",
                "eval.noise=false",
                "eval.missing=false",
            ],
        )
    )
    ckpt = run / "checkpoints" / "last.ckpt"
    stored = load_checkpoint(ckpt)
    old = {k: v for k, v in stored.items() if k != PREP_KEY}
    torch.save(old, tmp_path / "old.ckpt")
    with caplog.at_level(logging.WARNING):
        refitted = mnp.load(tmp_path / "old.ckpt")
    assert "refitting the scalers" in caplog.text
    rows = [x[test_idx, :32], x[test_idx, 32:]]
    np.testing.assert_array_equal(refitted.predict_proba(rows), mnp.load(run).predict_proba(rows))


def test_wrong_views_are_one_clear_line(tmp_path, one_thread):
    data = tmp_path / "digits.npz"
    x, _, _ = digits_file(data)
    run = tmp_path / "run"
    train(
        compose_train(
            run,
            [
                "model=mlp",
                "dataset=custom",
                f"dataset.path={data}",
                "trainer.max_epochs=1",
                "eval.noise=false",
                "eval.missing=false",
            ],
        )
    )
    predictor = mnp.load(run)
    with pytest.raises(ValueError, match="view x2 has shape \\(5, 31\\); the run was trained on rows of 32 columns"):
        predictor.predict_proba([x[:5, :32], x[:5, 32:63]])
    with pytest.raises(ValueError, match="unknown view 'x3'"):
        predictor.predict_proba({"x1": x[:5, :32], "x3": x[:5, 32:]})
    with pytest.raises(FileNotFoundError, match="holds no checkpoints/last.ckpt"):
        mnp.load(tmp_path)
