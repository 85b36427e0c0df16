"""The tuning experiment (docs/tuning.md): folds on the training rows only, declared spaces, the study's budget,
pruning and resume, and the end-to-end command (the seed check: tests/test_tuning_seed_check.py; the records,
mnp.tune.apply and the docs table: tests/test_tuning_records.py)."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import yaml
from cfg_utils import CONF, ROOT
from cli_utils import run_cli
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from datamodules.base import TensorDataModule
from datamodules.errors import DataError
from datamodules.folds import kfold_split
from mnp.cli.resolvers import register_resolver
from mnp.cli.validate import ConfigError, check_ranges
from mnp.tune.apply import apply
from mnp.tune.seedcheck import SeedCheck
from mnp.tune.space import SpaceError, contains, distribution
from mnp.tune.study import Study, TuneSettings

TUNED = ("mnp", "mcd", "de_ef", "de_lf", "sngp", "etp", "tmc", "mgp")
DATASETS = ("handwritten", "cub", "pie", "scene15")


# ---------------------------------------------------------------------------- folds
def test_the_folds_partition_the_training_rows_by_class_and_depend_on_the_seed_alone():
    y = np.repeat(np.arange(7), [12, 9, 5, 5, 17, 2, 8])
    vals = [kfold_split(y, 5, f, seed=3, source="y")[1] for f in range(5)]
    assert np.array_equal(np.sort(np.concatenate(vals)), np.arange(len(y)))  # disjoint and complete
    for f, val in enumerate(vals):
        train, _ = kfold_split(y, 5, f, seed=3, source="y")
        assert not set(train) & set(val) and len(train) + len(val) == len(y)
        for k, n in enumerate(np.bincount(y)):  # each class spread as evenly as the folds allow
            assert np.sum(y[val] == k) in (n // 5, -(-n // 5))
    assert np.array_equal(vals[0], kfold_split(y, 5, 0, seed=3, source="y")[1])
    assert not np.array_equal(vals[0], kfold_split(y, 5, 0, seed=4, source="y")[1])
    with pytest.raises(DataError, match="at least 2 training rows of every class"):
        kfold_split(np.array([0, 0, 1]), 2, 0, seed=0, source="y")


def _sentinel_data(n=60, test=20):
    """Two views whose test rows hold values no training row has (>= 1000), so any trace of them shows."""
    rng = np.random.default_rng(0)
    y = np.arange(n) % 3
    views = [rng.normal(size=(n, 4)), rng.normal(size=(n, 2))]
    test_idx = np.arange(n - test, n)
    for v in views:
        v[test_idx] += 1000.0
    return views, y, np.arange(n - test), test_idx


def test_cross_validation_never_holds_a_test_row_and_scales_on_the_folds_training_rows():
    views, y, train_idx, test_idx = _sentinel_data()
    dm = TensorDataModule(views, y, train_idx, test_idx, scaling="minmax", cv_folds=4, cv_fold=2)
    dm.eval_split = "val"
    dm.setup()
    assert len(dm.test_y) == 0 and all(len(v) == 0 for v in dm.test_views) and not dm.ood_sets
    assert len(dm.train_y) + len(dm.val_y) == len(train_idx)
    assert set(dm.train_idx) | set(dm.val_idx) == set(train_idx) and not set(dm.val_idx) & set(dm.train_idx)
    for sc, v in zip(dm.scalers, views):  # fitted on the fold's training rows: the test rows' 1000s never reach it
        assert np.allclose(sc.shift, v[dm.train_idx].min(0)) and (sc.shift + sc.scale < 100).all()
    (loader,) = dm.test_dataloader()
    assert len(loader.dataset) == len(dm.val_idx)


def test_cross_validation_settings_are_checked_in_one_line():
    views, y, tr, te = _sentinel_data()
    with pytest.raises(DataError, match="dataset.cv_folds must be 0"):
        TensorDataModule(views, y, tr, te, cv_folds=1)
    with pytest.raises(DataError, match=r"dataset.cv_fold must lie in \[0, 3\]"):
        TensorDataModule(views, y, tr, te, cv_folds=4, cv_fold=4)
    with pytest.raises(DataError, match="cv_folds and dataset.val_fraction both"):
        TensorDataModule(views, y, tr, te, cv_folds=4, val_fraction=0.2)
    with pytest.raises(ConfigError, match="set eval.split=val"):
        check_ranges({"trainer": {"max_epochs": 2}, "dataset": {"cv_folds": 5}, "eval": {"split": "test"}})


# ---------------------------------------------------------------------------- spaces
def test_sweep_expressions_become_optuna_distributions():
    assert distribution("a", "tag(log, interval(1e-4, 1e-2))") == FloatDistribution(1e-4, 1e-2, log=True)
    assert distribution("a", "interval(0.0, 0.5)") == FloatDistribution(0.0, 0.5)
    assert distribution("a", "range(100, 500, 100)") == IntDistribution(100, 400, step=100)
    assert distribution("a", "choice(true, false)") == CategoricalDistribution([True, False])
    hidden = distribution("a", "choice([256,128], [512,256])")
    assert contains(hidden, [512, 256]) and not contains(hidden, [512, 128])
    assert distribution("e", "epochs(0.5, 1, 2)", base_epochs=105).choices == (52, 105, 210)
    for bad, why in (("3", "fixed value"), ("tag(log, interval(0, 1))", "lower end > 0"), ("epochs(0)", "positive")):
        with pytest.raises(SpaceError, match=why):
            distribution("model.x", bad, base_epochs=10)


def compose_tune(model, dataset):
    GlobalHydra.instance().clear()
    register_resolver()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("train", [f"model={model}", f"dataset={dataset}", "experiment=tune"], return_hydra_config=True)


@pytest.mark.parametrize("model", TUNED)
def test_every_models_space_names_its_keys_and_holds_its_defaults_on_every_dataset(model):
    for dataset in DATASETS:
        cfg = compose_tune(model, dataset)
        sw = cfg.hydra.sweeper
        assert sw._target_.endswith("TuneSweeper") and sw.objective == cfg.optimized_metric == "val/nll"
        assert cfg.eval.split == "val" and cfg.dataset.val_fraction == 0 and cfg.dataset.cv_folds == sw.folds
        space = OmegaConf.to_container(sw.space)
        assert {"trainer.max_epochs"} <= set(space) and len(space) >= 4
        for key, spec in space.items():
            default = OmegaConf.select(cfg, key, default="<absent>")
            assert default != "<absent>", f"{model} on {dataset}: {key} is not a key of its config"
            dist = distribution(key, spec, base_epochs=cfg.trainer.max_epochs)
            assert contains(dist, OmegaConf.to_object(default) if OmegaConf.is_config(default) else default), (
                f"{model} on {dataset}: the default {key}={default} is outside {spec}"
            )


def test_every_tuned_model_has_a_space_and_the_authors_model_has_none():
    spaces = {p.stem for p in (ROOT / "conf" / "tune_space").glob("*.yaml")}
    assert set(TUNED) <= spaces and "mnp_official" not in spaces


# ---------------------------------------------------------------------------- the study, with stand-in jobs
def fake_launch(scores, calls):
    """Jobs that score a setting by a known function of its lr (the best at lr = 1e-3), per fold and training seed."""

    def launch(batch):
        out = []
        for job in batch:
            calls.append(job)
            kv = dict(j.split("=", 1) for j in job)
            lr, fold, seed = float(kv["model.optim.lr"]), int(kv["dataset.cv_fold"]), int(kv.get("seed", 0))
            out.append(scores(lr, fold, seed))
        return out

    return launch


def make_study(tmp_path, **kw):
    settings = TuneSettings(**{"n_trials": 6, "folds": 3, "n_startup_trials": 2, "prune_after": 0, **kw})
    space = {"model.optim.lr": "tag(log, interval(1e-5, 1e-1))", "model.dropout": "choice(0.0, 0.5)"}
    defaults = {"model.optim.lr": 1e-2, "model.dropout": 0.0}
    return Study(settings, space, tmp_path / "s", "mlp", "toy", fixed=["model=mlp"], defaults=defaults)


def by_lr(lr, fold, seed=0):
    return abs(math.log10(lr) + 3) + 0.01 * fold


def test_the_study_spends_its_budget_scores_the_fold_mean_and_starts_from_the_defaults(tmp_path):
    calls = []
    study = make_study(tmp_path)
    study.run(fake_launch(by_lr, calls))
    trials = study.study.trials
    assert len(trials) == 6 and len(calls) == 6 * 3 + 3 * 2 * 3  # and the seed check: 3 candidates x 2 seeds x 3 folds
    assert trials[0].params == {"model.optim.lr": 1e-2, "model.dropout": 0.0}  # trial 0: the defaults
    for t in trials:
        lr = float(dict(o.split("=") for o in t.user_attrs["overrides"])["model.optim.lr"])
        assert t.value == pytest.approx(np.mean([by_lr(lr, f) for f in range(3)]))
    rows = list(csv.DictReader(r for r in (study.sweep_dir / "trials.csv").read_text().splitlines() if r[0] != "#"))
    assert [r["chosen"] for r in rows].count("True") == 1
    best = yaml.safe_load((study.sweep_dir / "best.yaml").read_text())
    assert best["mean"] == pytest.approx(min(t.value for t in trials), rel=1e-5)  # every seed scores alike here
    assert sorted(best["fold_scores"]) == [0, 1, 2] and all(len(v) == 3 for v in best["fold_scores"].values())
    assert best["model"] == "mlp" and best["dataset"] == "toy" and "model.optim.lr=" in " ".join(best["overrides"])


def test_a_weak_trial_is_pruned_after_its_first_folds_and_a_failed_one_is_recorded(tmp_path):
    calls = []

    def scores(lr, fold, seed):
        if lr > 0.05:
            return RuntimeError("diverged")
        return by_lr(lr, fold)

    study = make_study(tmp_path, n_trials=12, prune_after=1, n_startup_trials=2, seed_check=SeedCheck(candidates=0))
    study.run(fake_launch(scores, calls))
    states = [t.state.name for t in study.study.trials]
    assert len(study.finished()) == 12 and "PRUNED" in states
    pruned = [t for t in study.study.trials if t.state.name == "PRUNED"]
    assert all(len(t.user_attrs["fold_scores"]) < 3 for t in pruned)
    assert len(calls) < 12 * 3  # pruning saved folds
    failed = [t for t in study.study.trials if t.state.name == "FAIL"]
    assert all(t.params["model.optim.lr"] > 0.05 for t in failed)


def test_a_killed_study_resumes_with_its_unfinished_trial_and_keeps_its_declaration(tmp_path):
    calls = []
    study = make_study(tmp_path, n_trials=3)
    study.run(fake_launch(by_lr, calls))
    killed = study.study.ask()  # a session killed during this trial leaves it running
    killed.suggest_float("model.optim.lr", 1e-5, 1e-1, log=True)
    killed.suggest_categorical("model.dropout", [0.0, 0.5])
    again = make_study(tmp_path, n_trials=5)
    again.run(fake_launch(by_lr, calls))
    trials = again.study.trials
    assert len(again.finished()) == 5 and trials[killed.number].user_attrs["requeued"]
    assert any(t.params == killed.params and t.state.name == "COMPLETE" for t in trials[killed.number + 1 :])
    params = [tuple(sorted(t.params.items())) for t in trials if not t.user_attrs.get("requeued")]
    assert len(set(params)) == len(params)  # the resumed sampler does not repeat the first session's draws
    with pytest.raises(ValueError, match="declared with another folds"):
        make_study(tmp_path, n_trials=5, folds=4)


def test_a_study_moves_between_machines_but_not_to_another_fixed_setting(tmp_path):
    """Where and how a study runs (log dir, launcher, trainer) may change between sessions; a result key may not.
    A record of before this rule (every override declared, paths.log_dir among them) resumes too."""

    def study(*fixed, n_trials=2):
        settings = TuneSettings(n_trials=n_trials, folds=3, n_startup_trials=1, prune_after=0)
        space = {"model.optim.lr": "tag(log, interval(1e-5, 1e-1))"}
        return Study(settings, space, tmp_path / "s", "mlp", "toy", fixed=["model=mlp", *fixed])

    first = study("paths.log_dir=/a", "trainer.max_epochs=5")
    first.run(fake_launch(by_lr, []))
    stored = first.study.user_attrs["declaration"]
    assert stored["fixed"] == ["model=mlp", "trainer.max_epochs=5"]
    first.study.set_user_attr(
        "declaration", {**stored, "fixed": ["model=mlp", "paths.log_dir=/a", "trainer.max_epochs=5"]}
    )
    moved = study("paths.log_dir=/b", "launcher=joblib", "trainer=gpu", "trainer.max_epochs=5", n_trials=3)
    moved.run(fake_launch(by_lr, []))
    assert len(moved.finished()) == 3
    with pytest.raises(ValueError, match="declared with another fixed"):
        study("paths.log_dir=/b", "trainer.max_epochs=6")


def test_study_settings_are_checked():
    for key, value in (("folds", 1), ("n_trials", 0), ("direction", "up"), ("objective", "test/nll")):
        with pytest.raises(ValueError, match=key if key != "objective" else "validation metric"):
            TuneSettings(**{key: value}).check()
    for check, why in ((SeedCheck(candidates=-1), "candidates must be an integer >= 0, got -1"),
                       (SeedCheck(seeds=[1, 0]), r"seeds must be distinct integers other than the study's seed 0, got \[1, 0\]"),
                       (SeedCheck(seeds=[]), "seeds must be distinct"), (SeedCheck(seeds=[2, 2]), "seeds must be distinct")):  # fmt: skip
        with pytest.raises(ValueError, match=f"hydra.sweeper.seed_check.{why}"):
            TuneSettings(seed_check=check).check()
    TuneSettings(seed_check=SeedCheck(seeds=[], candidates=0)).check()  # off: no seed needed
    TuneSettings(seed_check=SeedCheck(seeds=[0])).check(train_seed=3)


def read_csv(study_dir):
    text = (study_dir / "trials.csv").read_text()
    return list(csv.DictReader(r for r in text.splitlines() if not r.startswith("#")))


# ---------------------------------------------------------------------------- the command
@pytest.mark.slow
def test_the_tuning_command_runs_resumes_and_its_winner_becomes_a_config(tmp_path):
    args = [
        "train.py", "-m", "experiment=tune", "model=mlp", "dataset=synthetic", "trainer.max_epochs=2",
        "hydra.sweeper.folds=2", "hydra.sweeper.n_startup_trials=1", f"paths.log_dir={tmp_path}",
        "hydra.sweeper.seed_check.seeds=[1]",
    ]  # fmt: skip
    first = run_cli([*args, "hydra.sweeper.n_trials=2"])
    assert first.returncode == 0, first.stderr[-2000:]
    lines = [x for x in first.stdout.splitlines() if x.startswith("trial ")]
    assert len(lines) == 2 and "| folds " in lines[0] and "| best " in lines[0]
    checks = [x for x in first.stdout.splitlines() if x.startswith("seed check: ")]
    assert len(checks) == 3 and " | seed 0 " in checks[0] and " | seed 1 " in checks[0] and " wins, " in checks[2]
    study = tmp_path / "tune" / "mlp_synthetic"
    folds = sorted(p for p in study.iterdir() if (p / "metrics.json").exists())
    assert len(folds) == 4 + 2 * 1 * 2  # the study's 2 trials x 2 folds, its check's 2 candidates x 1 seed x 2 folds
    rows = [r for r in read_csv(study) if r["state"] == "seed check"]
    for run in folds:
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        assert cfg["eval"]["split"] == "val" and cfg["dataset"]["cv_folds"] == 2
        assert cfg["dataset"]["val_seed"] == compose_tune("mlp", "synthetic").dataset.val_seed  # the same folds
        metrics = json.loads((run / "metrics.json").read_text())
        assert "test/acc" not in metrics
        if cfg["seed"] == 1:  # a check run: its score is the one its row records
            (row,) = [r for r in rows if float(r["settings"].split()[0].split("=")[1]) == cfg["model"]["optim"]["lr"]]
            assert float(row["fold_scores"].split()[cfg["dataset"]["cv_fold"]]) == pytest.approx(
                metrics["val/nll"], rel=1e-5
            )
    assert sum(yaml.safe_load((r / "config.yaml").read_text())["seed"] == 1 for r in folds) == 4 and len(rows) == 2
    again = run_cli([*args, "hydra.sweeper.n_trials=2"])  # finished, its check too: nothing trains again
    assert again.returncode == 0 and not [x for x in again.stdout.splitlines() if x.startswith("trial ")]
    assert [x for x in again.stdout.splitlines() if x.startswith("seed check: ")] == checks
    assert sorted(p for p in study.iterdir() if (p / "metrics.json").exists()) == folds
    written = apply(study, tmp_path / "results", tmp_path / "conf")
    best = yaml.safe_load((study / "best.yaml").read_text())
    tuned = yaml.safe_load(written[1].read_text())
    assert tuned["model"]["optim"]["lr"] == pytest.approx(float(best["overrides"][0].split("=")[1]))
