"""One source of defaults: a baseline built from its bare constructor in Python is the model conf/model/<m>.yaml
builds, and trains as the CLI's default run does."""

import inspect

import numpy as np
import pytest
import pytorch_lightning as pl
from cfg_utils import CONF, compose_train
from hydra.utils import get_class
from omegaconf import OmegaConf
from sklearn.datasets import load_digits

from datamodules import TensorDataModule
from mnp.cli.pipeline import train
from mnp.framework.optim import make_optimizer

BASELINES = ["mlp", "mcd", "de_ef", "de_lf", "sngp", "etp", "tmc", "mgp"]
# a second model of one class: conf/model/<m>.yaml states the constructor arguments that make it that model
VARIANTS = {"de_lf": {"fusion": "late", "uncertainty": "entropy"}}


def optim_defaults(cls) -> dict:
    given = {
        k: p.default
        for k, p in inspect.signature(make_optimizer).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    return {k: list(v) if isinstance(v, tuple) else v for k, v in {**given, **cls.OPTIM}.items()}


@pytest.mark.parametrize("name", BASELINES)
def test_every_conf_model_value_is_the_constructors_default(name):
    node = OmegaConf.to_container(OmegaConf.load(f"{CONF}/model/{name}.yaml"))
    cls = get_class(node.pop("_target_"))
    node.pop("name")
    defaults = {k: p.default for k, p in inspect.signature(cls).parameters.items()}
    optim = optim_defaults(cls)
    for key, value in node.pop("optim", {}).items():
        assert optim[key] == value, f"{name}: optim.{key} is {value} in the YAML, {optim[key]} in {cls.__name__}"
    for key, value in node.items():
        default = list(defaults[key]) if isinstance(defaults[key], tuple) else defaults[key]
        expected = VARIANTS.get(name, {}).get(key, default)
        assert value == expected, f"{name}: {key} is {value} in the YAML, {default} in {cls.__name__}'s constructor"


def digits_views(tmp_path):
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    train_idx, test_idx = np.sort(order[:1400]), np.sort(order[1400:])
    np.savez(tmp_path / "digits.npz", x1=x[:, :32], x2=x[:, 32:], y=y, train_idx=train_idx, test_idx=test_idx)
    return [x[:, :32], x[:, 32:]], y, train_idx, test_idx


@pytest.mark.slow  # 8 trainings, twice each: about 50 s on 2 cores
@pytest.mark.parametrize("name", BASELINES)
def test_a_bare_constructor_trains_as_the_cli_default_run(tmp_path, name, one_thread):
    """The same epochs on digits split into two views: the bare constructor within 1 point of the CLI's run."""
    views, y, train_idx, test_idx = digits_views(tmp_path)
    epochs = 8
    overrides = [
        f"model={name}",
        "dataset=custom",
        f"dataset.path={tmp_path / 'digits.npz'}",
        "eval.noise=false",
        f"trainer.max_epochs={epochs}",
        "eval.missing=false",
    ]
    res = train(compose_train(tmp_path / "run", overrides))
    node = OmegaConf.load(f"{CONF}/model/{name}.yaml")
    pl.seed_everything(0)
    dm = TensorDataModule(views, y, train_idx, test_idx, scaling="standard", batch_size=200)
    dm.setup("fit")
    model = get_class(node._target_)(num_classes=10, view_dims=[32, 32], **VARIANTS.get(name, {}))
    pl.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    ).fit(model, dm)
    probs, _ = model.predict_tensors(dm.test_views, seed=0)
    acc = (probs.argmax(1).numpy() == dm.test_y.numpy()).mean()
    assert res["test/acc"] > 0.8, f"{name}: the CLI's run reaches {res['test/acc']:.3f}"
    assert abs(acc - res["test/acc"]) <= 0.01, f"{name}: bare constructor {acc:.3f}, CLI {res['test/acc']:.3f}"
