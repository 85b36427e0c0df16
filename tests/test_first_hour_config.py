"""A new user's first hour, the config side (the commands themselves: tests/test_first_hour.py): every
out-of-range or mistyped value names its key, the shipped configs validate, MNP's warm-up is a quarter of a
run or scales to a shortened one in one line, and the quick preset runs every model on every dataset in a few
short epochs, writing its record and no checkpoint."""

import re

import pytest
from cfg_utils import ROOT, compose_train

from mnp.cli.validate import ConfigError, resolve_auto, validate


# ---------------------------------------------------------------------------- errors before training
@pytest.mark.parametrize(
    "override, key",
    [
        ("trainer.max_epochs=0", "trainer.max_epochs"),
        ("seed=abc", "seed"),
        ("eval.noise_levels=[abc]", "eval.noise_levels"),
        ("eval.noise_levels=[]", "eval.noise_levels"),
        ("eval.noise_levels=[-1]", "eval.noise_levels"),
        ("eval.noise_levels=[inf]", "eval.noise_levels"),
        ("eval.n_bins=0", "eval.n_bins"),
        ("dataset.batch_size=0", "dataset.batch_size"),
        ("dataset.batch_size=-1", "dataset.batch_size"),
        ("dataset.val_fraction=1.0", "dataset.val_fraction"),
        ("dataset.val_fraction=-0.5", "dataset.val_fraction"),
        ("model.decoder.num_samples=0", "model.decoder.num_samples"),
        ("model.optim.lr=-1", "model.optim.lr"),
        ("model.aggregation.modality_mask=maybe", "model.aggregation.modality_mask"),
    ],
)
def test_every_out_of_range_or_mistyped_value_names_its_key(tmp_path, override, key):
    cfg = compose_train(tmp_path, ["model=mnp", "dataset=handwritten", override])
    resolve_auto(cfg)
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}\b"):
        validate(cfg)


def test_the_shipped_configs_validate(tmp_path):
    for model in ("mnp", "mnp_official", "mgp", "mlp", "tmc"):
        for dataset in ("handwritten", "pie", "synthetic"):
            cfg = compose_train(tmp_path, [f"model={model}", f"dataset={dataset}"])
            resolve_auto(cfg)
            validate(cfg)


def test_warmup_is_a_quarter_of_the_run_for_a_dataset_without_its_own_config(tmp_path):
    cfg = compose_train(tmp_path, ["model=mnp", "dataset=custom", "dataset.path=x.npz", "trainer.max_epochs=40"])
    resolve_auto(cfg)
    assert cfg.model.warmup.epochs == 10 and "warmup_fraction" not in cfg.model
    cfg = compose_train(tmp_path, ["model=mnp", "dataset=pie"])
    resolve_auto(cfg)
    assert cfg.model.warmup.epochs == 100  # a dataset's own config keeps its value


def test_a_run_shortened_below_the_datasets_warmup_scales_it_in_one_line(tmp_path, caplog):
    """``-m model=mnp,mlp dataset=cub trainer.max_epochs=20`` used to fail MNP's job on its 100 warm-up epochs."""
    import logging

    # (model, dataset, trainer.max_epochs) -> (warm-up, lines logged): 100 of Scene15's 300 epochs, 100 of
    # Handwritten's 105 for mnp_official (mnp's own Handwritten default has none: nothing to scale), 100 of PIE's 350
    cases = {
        ("mnp", "scene15", 20): (7, 1),
        ("mnp", "scene15", 120): (100, 0),
        ("mnp", "scene15", None): (100, 0),
        ("mnp_official", "handwritten", 5): (4, 1),
        ("mnp", "handwritten", 5): (0, 0),
        ("mnp", "pie", 1): (0, 1),
        ("mnp", "pie", 101): (100, 0),
        ("mnp", "pie", 100): (29, 1),
    }
    for (model, dataset, epochs), (warmup, logged) in cases.items():
        cfg = compose_train(
            tmp_path, [f"model={model}", f"dataset={dataset}"] + ([f"trainer.max_epochs={epochs}"] if epochs else [])
        )
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="mnp.cli.validate"):
            resolve_auto(cfg)
        validate(cfg)
        assert cfg.model.warmup.epochs == warmup, (model, dataset, epochs)
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == logged, lines  # one line when it is scaled
    caplog.clear()
    cfg = compose_train(tmp_path, ["model=mnp", "dataset=scene15", "trainer.max_epochs=20"])
    with caplog.at_level(logging.INFO, logger="mnp.cli.validate"):
        resolve_auto(cfg)
    assert [r.getMessage() for r in caplog.records] == [
        "trainer.max_epochs=20 leaves no epoch after the dataset's 100 warm-up epochs: the warm-up keeps its share "
        "of the run, model.warmup.epochs=7 (100 of 300 by default; set model.warmup.epochs to choose)"
    ]
    cfg = compose_train(tmp_path, ["model=mnp", "dataset=scene15", "trainer.max_epochs=20", "model.warmup.epochs=100"])
    resolve_auto(cfg)
    with pytest.raises(ConfigError, match=r"^model.warmup.epochs=100 >= trainer.max_epochs=20"):
        validate(cfg)  # a warm-up the user gives is the user's


@pytest.mark.slow
def test_the_quick_preset_runs_every_model_on_every_dataset_in_a_few_short_epochs(tmp_path):
    models, datasets = (sorted(p.stem for p in (ROOT / "conf" / g).glob("*.yaml")) for g in ("model", "dataset"))
    for model in models:
        for dataset in datasets:
            cfg = compose_train(
                tmp_path,
                [f"model={model}", f"dataset={dataset}", "experiment=quick"]
                + (["dataset.path=x.npz"] if dataset == "custom" else []),
            )
            resolve_auto(cfg)
            validate(cfg)
            assert (cfg.trainer.max_epochs, cfg.trainer.limit_train_batches, cfg.experiment_name) == (10, 5, "quick")
            assert cfg.callbacks.checkpoint.every_n_epochs == 0  # a toy run keeps no 20-160 MB checkpoints
            assert ((cfg.model.get("warmup") or {}).get("epochs") or 0) < 10


def test_a_quick_run_writes_its_record_and_no_checkpoint(tmp_path):
    from mnp.cli.pipeline import train

    res = train(
        compose_train(tmp_path / "run", ["experiment=quick", "model=mlp", "dataset.n_train=100", "dataset.n_test=40"])
    )
    assert res["epochs"] == 10 and (tmp_path / "run" / "metrics.json").is_file()
    assert (tmp_path / "run" / "predictions.npz").is_file() and not (tmp_path / "run" / "checkpoints").exists()
