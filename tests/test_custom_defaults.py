"""Your own data with the defaults: every model's run is sized by optimiser steps on the data, and
`python train.py dataset=custom dataset.path=<file>` with the default model (mnp) lands within 3 accuracy points
of the default mlp on four small scikit-learn sets split into views (wine, iris, breast_cancer, digits)."""

import logging
import sys

import numpy as np
import pytest
from cfg_utils import ROOT, compose_train

from mnp.cli.pipeline import train

sys.path.insert(0, str(ROOT / "benchmarks"))
from custom_defaults import DATASETS, run, updated  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DATASETS))
def test_default_mnp_is_within_3_points_of_default_mlp(tmp_path, name):
    path = tmp_path / f"{name}.npz"
    np.savez(path, **DATASETS[name]())
    acc = {m: run(m, path, tmp_path / m, ("eval.noise=false",))["acc"] for m in ("mnp", "mlp")}
    assert acc["mnp"] >= acc["mlp"] - 0.03, acc
    assert acc["mnp"] > 1.5 / len(np.unique(DATASETS[name]()["y"]))  # well beyond chance


MODELS = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml"))


def test_every_model_sizes_a_custom_run_by_optimiser_steps(tmp_path):
    """No model's default on your own data is a fixed number of epochs (20 epochs of wine's one batch were 20
    steps): trainer.max_epochs is left to the data, for about 500 steps, with a floor."""
    for model in MODELS:
        cfg = compose_train(tmp_path, [f"model={model}", "dataset=custom", "dataset.path=x.npz"])
        assert cfg.trainer.max_epochs is None and cfg.train_steps == 500, model
        assert cfg.min_epochs == (60 if model.startswith("mnp") else 20), model


@pytest.mark.usefixtures("one_thread")
def test_the_epochs_come_from_the_training_batches_in_one_line(tmp_path, caplog):
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 40)  # 96 training rows: 1 batch of 200, 4 of 30
    path = tmp_path / "d.npz"
    np.savez(path, x1=rng.normal(size=(120, 4)) + y[:, None], x2=rng.normal(size=(120, 3)), y=y)
    base = ["model=mlp", "dataset=custom", f"dataset.path={path}", "eval.noise=false", "train_steps=12"]
    with caplog.at_level(logging.INFO, logger="mnp.cli.validate"):
        res = train(compose_train(tmp_path / "a", [*base, "min_epochs=2"]))
    assert res["epochs"] == 12
    assert "1 training batches per epoch: trainer.max_epochs=12 for about train_steps=12 optimiser steps" in caplog.text
    assert train(compose_train(tmp_path / "b", [*base, "min_epochs=2", "dataset.batch_size=30"]))["epochs"] == 3
    assert train(compose_train(tmp_path / "c", [*base, "min_epochs=5", "dataset.batch_size=30"]))["epochs"] == 5
    assert train(compose_train(tmp_path / "d", [*base, "trainer.max_epochs=2"]))["epochs"] == 2  # given: as given


def test_update_replaces_only_the_models_rerun_and_keeps_the_table_order():
    """``--update``: the re-run model's rows replace its old ones, every other row stays, rows stay in dataset
    then model order, and the command joins ``updated_by``."""
    wine, iris = list(DATASETS)[:2]
    old = {
        "command": "first",
        "overrides": [],
        "runs": [
            {"dataset": wine, "model": "mnp", "acc": 0.9},
            {"dataset": wine, "model": "mgp", "acc": 0.5},
            {"dataset": iris, "model": "mnp", "acc": 0.8},
            {"dataset": iris, "model": "mgp", "acc": 0.4},
        ],
    }
    new = [{"dataset": wine, "model": "mgp", "acc": 1.0}, {"dataset": iris, "model": "mgp", "acc": 0.9}]
    got = updated(old, new, ["mgp"], "second")
    assert [(r["dataset"], r["model"], r["acc"]) for r in got["runs"]] == [
        (wine, "mnp", 0.9),
        (wine, "mgp", 1.0),
        (iris, "mnp", 0.8),
        (iris, "mgp", 0.9),
    ]
    assert got["command"] == "first" and got["updated_by"] == ["second"]
