"""The tuning experiment (docs/tuning.md): folds on the training rows only, declared spaces, the study's budget,
pruning, resume and records, and the end-to-end command."""

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
from mnp.runs.signals import Terminated
from mnp.tune.apply import apply
from mnp.tune.records import tuned_config
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


# ---------------------------------------------------------------------------- the seed check
def read_csv(study_dir):
    text = (study_dir / "trials.csv").read_text()
    return list(csv.DictReader(r for r in text.splitlines() if not r.startswith("#")))


def ranked(study):
    """The study's complete trials, best first."""
    return sorted((t for t in study.study.trials if t.state.name == "COMPLETE"), key=lambda t: (t.value, t.number))


def lr_of(trial):
    """The learning rate a trial's jobs were given (its override, 4 significant digits)."""
    return float(dict(o.split("=") for o in trial.user_attrs["overrides"])["model.optim.lr"])


def test_a_candidate_whose_other_seeds_diverge_loses_to_a_stable_one_when_the_finished_study_is_rerun(tmp_path):
    """The study runs without its check; re-run with the check on (not part of its declaration), it trains the
    three best trials' folds at seeds 1 and 2: the study's best collapses at seed 1, so the second best wins."""
    first = make_study(tmp_path, seed_check=SeedCheck(candidates=0))
    first.run(fake_launch(by_lr, []))
    assert yaml.safe_load((first.sweep_dir / "best.yaml").read_text())["chosen_by"] == "the study (seed check off)"
    top = ranked(first)[:3]
    lr = {t.number: lr_of(t) for t in top}

    def scores(x, fold, seed):  # the study's best reaches chance (log 10) on two folds at seed 1
        unstable = seed == 1 and fold < 2 and x == lr[top[0].number]
        return math.log(10) if unstable else by_lr(x, fold)

    calls = []
    again = make_study(tmp_path, seed_check=SeedCheck(seeds=[1, 2], candidates=3))
    again.run(fake_launch(scores, calls))
    assert len(again.finished()) == 6 and len(calls) == 3 * 2 * 3  # no trial again: the check only
    assert sorted({(c[-1], c[-2]) for c in calls}) == sorted(
        {(f"seed={s}", f"dataset.cv_fold={f}") for s in (1, 2) for f in range(3)}
    )
    expected = {}
    for t in top:
        values = [scores(lr[t.number], f, s) for s in (0, 1, 2) for f in range(3)]
        expected[t.number] = np.mean(values)
    winner = min(top, key=lambda t: expected[t.number])
    assert winner.number == top[1].number  # the stable second best
    best = yaml.safe_load((again.sweep_dir / "best.yaml").read_text())
    assert best["trial"] == winner.number and best["chosen_by"] == "seed check (seeds 0, 1, 2; 3 candidates)"
    assert best["mean"] == pytest.approx(expected[winner.number], rel=1e-5)
    assert best["fold_scores"][1] == pytest.approx([by_lr(lr[winner.number], f) for f in range(3)], rel=1e-5)
    assert best["overrides"] == winner.user_attrs["overrides"] and best["seed_check_runs_to_go"] == 0
    assert [c["trial"] for c in best["candidates"]] == [t.number for t in top]
    assert best["study_best"]["trial"] == top[0].number and best["study_best"]["mean"] == pytest.approx(
        top[0].value, rel=1e-5
    )
    rows = read_csv(again.sweep_dir)
    checks = [r for r in rows if r["state"] == "seed check"]
    assert [(int(r["trial"]), int(r["seed"])) for r in checks] == [(t.number, s) for t in top for s in (1, 2)]
    unstable = next(r for r in checks if int(r["trial"]) == top[0].number and r["seed"] == "1")
    assert [float(v) for v in unstable["fold_scores"].split()][:2] == pytest.approx([math.log(10)] * 2, rel=1e-5)
    chosen = [r for r in rows if r["chosen"] == "True"]
    assert [int(r["trial"]) for r in chosen] == [winner.number] and chosen[0]["seed"] == "0"
    assert float(chosen[0]["seeds_mean"]) == pytest.approx(expected[winner.number], rel=1e-5)


def test_trial_0_can_win_and_a_candidate_whose_run_fails_is_out(tmp_path):
    """Three trials, all candidates: the defaults (lr 1e-2) are the worst at seed 0 but the only ones stable at
    seed 1; one other candidate's run fails there, and its remaining runs are not trained."""
    defaults = 1e-2

    def scores(x, fold, seed):
        if seed == 0 or x == defaults:
            return by_lr(x, fold)
        return RuntimeError("diverged") if x == failing else 5.0

    failing = None
    study = make_study(tmp_path, n_trials=3, seed_check=SeedCheck(candidates=0))
    study.run(fake_launch(scores, []))
    top = ranked(study)
    assert top[-1].number == 0 and len(top) == 3  # the defaults: the study's worst
    failing = lr_of(top[0])
    calls = []
    again = make_study(tmp_path, n_trials=3, seed_check=SeedCheck(seeds=[1, 2], candidates=3))
    again.run(fake_launch(scores, calls))
    assert sum(c[1] == f"model.optim.lr={failing:.4g}" for c in calls) == 1  # its first run fails: no other is trained
    assert len(calls) == 1 + 2 * 2 * 3
    best = yaml.safe_load((again.sweep_dir / "best.yaml").read_text())
    assert best["trial"] == 0 and best["chosen_by"] == "seed check (seeds 0, 1, 2; 3 candidates)"
    assert best["mean"] == pytest.approx(np.mean([by_lr(defaults, f) for f in range(3)]), rel=1e-5)
    assert best["candidates"][0] == {"trial": top[0].number, "mean": None, "failed": "seed 1, fold 0: diverged"}
    assert best["candidates"][1]["mean"] == pytest.approx(
        np.mean([by_lr(lr_of(top[1]), f) for f in range(3)] + [5.0] * 6), rel=1e-5
    )
    failed = [r for r in read_csv(again.sweep_dir) if r["state"] == "seed check failed"]
    assert [(int(r["trial"]), r["seed"], r["folds_done"]) for r in failed] == [(top[0].number, "1", "0")]


class RunDirs:
    """Fold jobs as ``skip_if_done`` runs them: a finished job's score is read back, not trained again; the session
    is killed (SIGTERM) once ``kill_after`` seed-check runs have trained."""

    def __init__(self):
        self.done, self.trained, self.kill_after = {}, [], None

    def launch(self, batch):
        out = []
        for job in batch:
            key = tuple(job)
            if key not in self.done:
                if self.kill_after is not None and sum("seed=" in " ".join(j) for j in self.trained) >= self.kill_after:
                    raise Terminated("terminated by SIGTERM")
                self.trained.append(key)
                kv = dict(j.split("=", 1) for j in job)
                self.done[key] = by_lr(float(kv["model.optim.lr"]), int(kv["dataset.cv_fold"])) + 0.1 * int(
                    kv.get("seed", 0)
                )
            out.append(self.done[key])
        return out


@pytest.mark.parametrize("parallel", [False, True])
def test_a_check_killed_midway_resumes_without_training_a_finished_fold_again(tmp_path, parallel):
    runs = RunDirs()
    runs.kill_after = 4  # one at a time: inside the first candidate's seed 2; together: inside its batch of six
    with pytest.raises(Terminated):
        make_study(tmp_path, n_trials=3).run(runs.launch, parallel_folds=parallel)
    stored = make_study(tmp_path, n_trials=3).study.user_attrs.get("seed_check", {}).get("scores", {})
    recorded = sum(map(len, (v for t in stored.values() for v in t.values())))
    assert recorded == (0 if parallel else 4)  # one at a time, each run is stored as it ends
    to_go = 3 * 2 * 3 - recorded
    assert (
        f"# chosen_by: the study (its seed check is unfinished: {to_go} fold runs to go)"
        in (tmp_path / "s" / "trials.csv").read_text()
    )
    with pytest.raises(ValueError) as refused:  # the study's budget is spent, its check is not
        apply(tmp_path / "s", tmp_path / "results", tmp_path / "conf")
    assert str(refused.value) == (
        f"{tmp_path / 's'}: its seed check is not finished ({to_go} fold runs to go); finish it with: "
        "python train.py -m model=mlp"
    )
    assert not (tmp_path / "results").exists()
    runs.kill_after = None
    again = make_study(tmp_path, n_trials=3)
    again.run(runs.launch, parallel_folds=parallel)
    assert len(runs.trained) == len(set(runs.trained)) == 3 * 3 + 3 * 2 * 3  # every run trained once
    best = yaml.safe_load((again.sweep_dir / "best.yaml").read_text())
    assert best["chosen_by"] == "seed check (seeds 0, 1, 2; 3 candidates)"
    lr = float(best["overrides"][0].split("=")[1])
    assert best["mean"] == pytest.approx(
        np.mean([by_lr(lr, f) + 0.1 * s for s in (0, 1, 2) for f in range(3)]), rel=1e-4
    )


# ---------------------------------------------------------------------------- records
def test_the_tuned_config_holds_the_winners_values_as_the_config_reads_them():
    text = tuned_config(
        ["model.optim.lr=0.00492", "model.hidden=[512,256]", "model.flag=true", "trainer.max_epochs=50"], "x"
    )
    assert text.startswith("# @package _global_\n")
    cfg = OmegaConf.create(yaml.safe_load(text))
    assert cfg.model.optim.lr == 0.00492 and list(cfg.model.hidden) == [512, 256] and cfg.model.flag is True
    assert cfg.trainer.max_epochs == 50 and isinstance(cfg.trainer.max_epochs, int)


def test_apply_refuses_an_unfinished_study_and_the_authors_model(tmp_path):
    study = make_study(tmp_path, n_trials=2)
    study.run(fake_launch(by_lr, []))
    written = apply(study.sweep_dir, tmp_path / "results", tmp_path / "conf")
    assert [p.name for p in written] == ["mlp_toy.csv", "mlp_toy.yaml"]
    best = yaml.safe_load((study.sweep_dir / "best.yaml").read_text())
    assert f"(trial {best['trial']}, seed check mean {best['mean']:.4g})" in written[1].read_text()
    assert "# budget: 2 finished trials" in written[0].read_text()
    text = (study.sweep_dir / "trials.csv").read_text().replace("# budget: 2 finished", "# budget: 9 finished")
    (study.sweep_dir / "trials.csv").write_text(text)
    with pytest.raises(ValueError, match="2 of 9 trials finished"):
        apply(study.sweep_dir, tmp_path / "results", tmp_path / "conf")
    best = study.sweep_dir / "best.yaml"
    best.write_text(best.read_text().replace("model: mlp", "model: mnp_official"))
    (study.sweep_dir / "trials.csv").write_text(text.replace("# budget: 9 finished", "# budget: 2 finished"))
    with pytest.raises(ValueError, match="stays untuned"):
        apply(study.sweep_dir, tmp_path / "results", tmp_path / "conf")


def test_apply_takes_a_study_whose_check_is_off_and_refuses_a_record_older_than_the_check(tmp_path):
    study = make_study(tmp_path, n_trials=2, seed_check=SeedCheck(candidates=0))
    calls = []
    study.run(fake_launch(by_lr, calls))
    assert len(calls) == 2 * 3 and "# seed_check: off\n" in (study.sweep_dir / "trials.csv").read_text()
    written = apply(study.sweep_dir, tmp_path / "results", tmp_path / "conf")
    best = yaml.safe_load((study.sweep_dir / "best.yaml").read_text())
    assert best["chosen_by"] == "the study (seed check off)" and best["trial"] == best["study_best"]["trial"]
    assert f"(trial {best['trial']}, mean {best['mean']:.4g})" in written[1].read_text()
    old = {k: v for k, v in best.items() if k not in ("seed_check", "chosen_by", "seed_check_runs_to_go")}
    (study.sweep_dir / "best.yaml").write_text(yaml.safe_dump(old))
    with pytest.raises(
        ValueError, match=r": its seed check is not finished \(its record is older than the seed check\)"
    ):
        apply(study.sweep_dir, tmp_path / "results", tmp_path / "conf")


def test_an_applied_study_wins_over_the_defaults_and_paper_tuned_refuses_a_pair_without_one(tmp_path):
    from cfg_utils import compose_train

    from mnp.cli.validate import validate

    applied = sorted((ROOT / "conf" / "tuned").glob("*.yaml"))
    assert applied, "no study is applied (conf/tuned/ is empty)"
    for path in applied:
        tuned = yaml.safe_load(path.read_text())
        model, dataset = path.stem.rsplit("_", 1)
        cfg = compose_train(tmp_path, ["experiment=paper_tuned", f"model={model}", f"dataset={dataset}"])
        assert cfg.tuned_from == tuned["tuned_from"] and cfg.tuned_from.startswith(f"results/tuning/{path.stem}.csv")
        assert (ROOT / cfg.tuned_from.split(" ")[0]).is_file()  # its record is committed
        for key, value in tuned.get("model", {}).items():
            if not isinstance(value, dict):
                assert OmegaConf.to_container(cfg.model)[key] == value, (path.stem, key)
        assert cfg.trainer.max_epochs == tuned["trainer"]["max_epochs"]
        validate(cfg)  # the experiment accepts it
        untuned = compose_train(tmp_path, ["experiment=paper_main", f"model={model}", f"dataset={dataset}", "~tuned"])
        assert untuned.tuned_from is None
        study = compose_train(tmp_path, ["experiment=tune", f"model={model}", f"dataset={dataset}"])
        assert study.tuned_from is None and study.trainer.max_epochs == untuned.trainer.max_epochs  # as it began
    with pytest.raises(ConfigError, match=r"conf/tuned/etp_synthetic.yaml does not exist: finish the study"):
        validate(compose_train(tmp_path, ["experiment=paper_tuned", "model=etp", "dataset=synthetic"]))
    with pytest.raises(ConfigError, match="mnp_official is the authors' configuration"):
        validate(compose_train(tmp_path, ["experiment=paper_tuned", "model=mnp_official", "dataset=cub"]))


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


def test_the_docs_table_of_studies_reads_a_study_record(tmp_path):
    from mnp.tools.docgen.docgen_tuning import render_tuning, study

    s = make_study(tmp_path, n_trials=4)
    s.run(fake_launch(by_lr, []))
    got = study(s.sweep_dir / "trials.csv")
    values = [t.value for t in s.study.trials]
    assert got["budget"] == 4 and got["done"] == 4 and got["default"] == pytest.approx(values[0], rel=1e-5)
    assert got["best"] == pytest.approx(min(values), rel=1e-5) and got["best_trial"] == values.index(min(values))
    best = yaml.safe_load((s.sweep_dir / "best.yaml").read_text())
    assert got["check"] == pytest.approx(best["mean"], rel=1e-5) and got["check_trial"] == best["trial"]
    assert got["settings"] == " ".join(best["overrides"])
    assert f"| MLP on toy | 4 of 4 (0, 0) | {values[0]:.4f} |" in render_tuning({"tuning": {"mlp_toy": got}})
    assert f"| {got['check']:.4f} (trial {best['trial']}) | `{got['settings']}` |" in render_tuning(
        {"tuning": {"mlp_toy": got}}
    )


def test_the_docs_table_reads_a_record_older_than_the_seed_check(tmp_path):
    from mnp.tools.docgen.docgen_tuning import render_tuning, study

    old = tmp_path / "trials.csv"  # as the studies wrote it before the check: no seed, seeds_mean or chosen_by
    old.write_text(
        "# study: etp_cub\n# budget: 3 finished trials; TPE (multivariate, seed 0, 8 start-up trials)\n"
        "trial,state,requeued,settings,folds_done,mean,fold_scores,chosen\n"
        "0,complete,False,model.optim.lr=0.01,2,0.3,0.2 0.4,False\n"
        "1,pruned,False,model.optim.lr=0.02,1,,0.9,False\n"
        "2,complete,False,model.optim.lr=0.005,2,0.25,0.2 0.3,True\n"
    )
    got = study(old)
    assert (got["done"], got["pruned"], got["default"], got["best"], got["best_trial"]) == (3, 1, 0.3, 0.25, 2)
    assert got["check"] is None and got["check_trial"] is None and got["settings"] == "model.optim.lr=0.005"
    assert "| ETP on CUB | 3 of 3 (1, 0) | 0.3000 | 0.2500 (trial 2) | – | `model.optim.lr=0.005` |" in render_tuning(
        {"tuning": {"etp_cub": got}}
    )
