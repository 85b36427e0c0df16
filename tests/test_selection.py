"""The selection protocol: fixed validation rows, an evaluation that reads no test row, and decision records
chosen by a declared validation criterion (mnp/tools/select/select.py)."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import yaml
from cfg_utils import ROOT, compose_train
from scipy import stats

from datamodules import TensorDataModule
from mnp.cli.pipeline import train
from mnp.cli.validate import ConfigError, validate
from mnp.eval.protocols import validation_names
from mnp.model.parts import LossPart
from mnp.runs.migrations import MNP_TARGET
from mnp.tools.report.report_runs import load
from mnp.tools.select import select


def _module(seed: int, **kw) -> TensorDataModule:
    rng = np.random.default_rng(0)
    y = np.tile(np.arange(4), 25)  # 20 training rows of each class in the first 80
    views = [rng.normal(size=(100, 3)) + y[:, None], rng.normal(size=(100, 2))]
    dm = TensorDataModule(views, y, np.arange(80), np.arange(80, 100), val_fraction=0.2, seed=seed, **kw)
    dm.setup()
    return dm


def test_validation_rows_are_fixed_per_dataset_stratified_and_apart_from_test():
    a, b = _module(seed=0), _module(seed=7)
    assert np.array_equal(a.val_idx, b.val_idx)  # the run's seed does not move them
    assert len(a.val_idx) == 16 and not set(a.val_idx) & set(a.train_idx) and not set(a.val_idx) & set(a.test_idx)
    assert sorted(np.bincount(a.val_y.numpy()).tolist()) == [4, 4, 4, 4]  # 20 % of each class's 20 training rows
    assert not np.array_equal(_module(seed=0, val_seed=1).val_idx, a.val_idx)


def test_eval_split_val_serves_the_validation_rows_only():
    dm = _module(seed=0)
    dm.eval_split = "val"
    (loader,) = dm.test_dataloader()
    labels = np.concatenate([batch[1].numpy() for batch in loader])
    assert np.array_equal(labels, dm.val_y.numpy()) and len(labels) == len(dm.val_idx)


def test_validation_names():
    assert validation_names({"test/acc": 1, "noise/acc@1": 2, "missing/acc_mean": 3, "time/test_s": 4}) == {
        "val/acc": 1,
        "val/noise/acc@1": 2,
        "val/missing/acc_mean": 3,
        "time/test_s": 4,
    }


def test_eval_split_val_without_validation_rows_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="eval.split=val .* dataset.val_fraction > 0"):
        validate(compose_train(tmp_path, ["model=mlp", "eval.split=val"]))


def test_select_run_records_validation_metrics_and_no_test_metric(tmp_path, one_thread):
    res = train(
        compose_train(tmp_path / "r", ["model=mlp", "experiment=select", "trainer.max_epochs=3", "dataset.num_views=2"])
    )
    assert res["eval_split"] == "val" and res["val_rows"] > 0 and len(res["val_idx_sha256"]) == 64
    assert res["val/acc"] > 0.5 and "val/noise/acc_mean" in res and "val/missing/acc_mean" in res
    assert not [k for k in res if k.startswith(("test/", "noise/", "missing/", "ood/"))]
    arrays = np.load(tmp_path / "r" / "predictions.npz")
    assert len(arrays["val/labels"]) == res["val_rows"] and "test/labels" not in arrays


def _fake_run(
    root,
    name: str,
    seed: int,
    metrics: dict,
    variant: str | None = None,
    split: str = "val",
    memory_size: int = 200,
    model: str = "mnp",
):
    d = root / f"{name}_s{seed}"
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(
        json.dumps(
            {"model": model, "dataset": "cub", "seed": seed, "experiment": "select", "eval_split": split, **metrics}
        )
    )
    config = {"variant": variant, "model": {"memory": {"size": memory_size}}, "dataset": {"seed": seed}}
    (d / "config.yaml").write_text(yaml.safe_dump(config))


def _sweep(tmp_path, nll: dict[str, list[float]]):
    for name, values in nll.items():
        for seed, v in enumerate(values):
            variant = None if name == "default" else name
            _fake_run(tmp_path, name, seed, {"val/nll": v, "val/acc": 1 - v / 10, "test/acc": 0.0}, variant)


def test_decide_picks_the_best_validation_criterion_with_a_paired_test(tmp_path):
    _sweep(
        tmp_path,
        {
            "default": [0.50, 0.52, 0.47],
            "model.memory.size=300": [0.45, 0.50, 0.46],
            "model.memory.size=400": [0.55, 0.51, 0.49],
            "model.encoder.projection=none": [0.1, 0.1, 0.1],
        },
    )
    out = tmp_path / "decisions" / "mnp_cub.csv"
    assert (
        select.main(
            [
                "decide",
                str(tmp_path),
                "--model",
                "mnp",
                "--dataset",
                "cub",
                "--decision",
                "memory_size",
                "--match",
                "memory.size",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = {r["candidate"]: r for r in csv.DictReader(out.open())}
    assert set(rows) == {"default", "model.memory.size=300", "model.memory.size=400"}  # not projection=none
    assert [c for c, r in rows.items() if r["chosen"] == "True"] == ["model.memory.size=300"]
    assert rows["default"]["setting"] == "model.memory.size=200"
    assert "test/acc" not in rows["default"] and float(rows["default"]["val/acc"]) == pytest.approx(
        1 - np.mean([0.50, 0.52, 0.47]) / 10, rel=1e-5
    )
    d = np.array([0.45, 0.50, 0.46]) - np.array([0.50, 0.52, 0.47])  # the t-test by hand
    t = d.mean() / (d.std(ddof=1) / math.sqrt(3))
    assert float(rows["model.memory.size=300"]["p_vs_default"]) == pytest.approx(2 * stats.t.sf(abs(t), 2), rel=1e-5)
    assert float(rows["model.memory.size=300"]["diff_vs_default"]) == pytest.approx(d.mean(), rel=1e-5)


def test_decide_keeps_default_on_a_tie_and_other_decisions_rows(tmp_path):
    out = tmp_path / "d.csv"
    rows = select.decide({"default": {0: {"val/nll": 1.0}}, "x=1": {0: {"val/nll": 1.0}}}, "val/nll", False)
    assert [r["candidate"] for r in rows if r["chosen"]] == ["default"]
    select.write_decision(out, "mnp", "cub", "a", rows, "decided", "")
    select.write_decision(out, "mnp", "cub", "b", rows, "decided", "")
    select.write_decision(out, "mnp", "cub", "a", rows[:1] + rows[:1], "decided", "again")
    written = list(csv.DictReader(out.open()))
    assert [r["decision"] for r in written] == ["b", "b", "a", "a"] and written[-1]["note"] == "again"


def test_require_p_keeps_default_unless_a_candidate_wins_below_it():
    """The declared rule: the best mean alone does not replace default; a paired t-test below P does."""
    default = {s: {"val/nll": v} for s, v in enumerate([0.50, 0.52, 0.47, 0.55])}
    noisy = {s: {"val/nll": v} for s, v in enumerate([0.40, 0.60, 0.40, 0.56])}  # lower mean, erratic
    steady = {s: {"val/nll": v - 0.01} for s, v in enumerate([0.50, 0.52, 0.47, 0.55])}  # 0.01 lower on every seed
    d = np.array([-0.10, 0.08, -0.07, 0.01])
    p_noisy = 2 * stats.t.sf(abs(d.mean() / (d.std(ddof=1) / 2)), 3)  # the paired t-test by hand
    assert p_noisy > 0.05
    candidates = {"default": default, "x=noisy": noisy}
    assert [r["candidate"] for r in select.decide(candidates, "val/nll", False) if r["chosen"]] == ["x=noisy"]
    rows = select.decide(candidates, "val/nll", False, require_p=0.05)
    assert [r["candidate"] for r in rows if r["chosen"]] == ["default"]
    assert {r["rule"] for r in rows} == {"best mean, p < 0.05 vs default"}
    assert float(rows[1]["p_vs_default"]) == pytest.approx(p_noisy, rel=1e-6)
    rows = select.decide(candidates | {"x=steady": steady}, "val/nll", False, require_p=0.05)
    assert [r["candidate"] for r in rows if r["chosen"]] == ["x=steady"]  # p = 0: it replaces default
    with pytest.raises(select.SelectionError, match="require-p"):
        select.decide(candidates, "val/nll", False, require_p=0)


def test_select_refuses_test_metrics_and_test_split_runs(tmp_path, capsys):
    with pytest.raises(select.SelectionError, match="never chosen on test rows"):
        select.decide({"default": {0: {"test/acc": 1.0}}, "x=1": {0: {"test/acc": 0.0}}}, "test/acc", True)
    _fake_run(tmp_path, "default", 0, {"val/nll": 1.0})
    _fake_run(tmp_path, "other", 0, {"test/nll": 1.0}, variant="model.memory.size=300", split="test")
    assert (
        select.main(
            [
                "decide",
                str(tmp_path),
                "--model",
                "mnp",
                "--dataset",
                "cub",
                "--decision",
                "m",
                "--match",
                "memory",
                "--out",
                str(tmp_path / "o.csv"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "evaluated on the test split" in err and len(err.strip().splitlines()) == 1


def test_decide_weighs_a_rival_models_defaults_against_a_base_variant(tmp_path):
    """``--base`` makes a decided variant the reference; ``--rival`` adds another model's defaults as a candidate,
    while the runs of the old defaults (no variant) and the rival's own variants are not candidates. A run from
    before the parts names its variant with flat keys (``model.memory_size``): today's key finds it."""
    joint = "model.memory.size=300"
    for seed, (old, new, rival, rival_variant) in enumerate([(0.9, 0.40, 0.50, 0.1), (0.9, 0.42, 0.49, 0.1)]):
        _fake_run(tmp_path, "old", seed, {"val/nll": old})
        _fake_run(tmp_path, "joint", seed, {"val/nll": new}, variant="model.memory_size=300", memory_size=300)
        _fake_run(tmp_path, "official", seed, {"val/nll": rival}, model="mnp_official")
        _fake_run(tmp_path, "official_v", seed, {"val/nll": rival_variant}, variant=joint, model="mnp_official")
    out = tmp_path / "d.csv"
    args = ["decide", str(tmp_path), "--model", "mnp", "--dataset", "cub", "--decision", "configuration"]
    assert select.main([*args, "--base", joint, "--rival", "mnp_official", "--out", str(out)]) == 0
    rows = {r["candidate"]: r for r in csv.DictReader(out.open())}
    assert set(rows) == {"default", "model=mnp_official"}
    assert rows["default"]["setting"] == "model.memory.size=300" and rows["default"]["chosen"] == "True"
    # what adopting the rival sets: each key where its config differs from the base's run of the same seed (the
    # rival's memory size; not dataset.seed)
    assert rows["model=mnp_official"]["setting"] == "model.memory.size=200"
    assert float(rows["model=mnp_official"]["score"]) == pytest.approx(0.495)
    assert float(rows["model=mnp_official"]["diff_vs_default"]) == pytest.approx(0.085)
    assert select.main([*args, "--rival", "tmc", "--out", str(out)]) == 2  # no runs of that model: one line


def test_a_rivals_setting_is_every_training_key_it_differs_in_not_its_name_nor_test_or_inference_keys(tmp_path):
    for name, model, cfg in [
        ("base", "mnp", {"name": "mnp", "decoder": {"train": True, "eval_samples": 20}, "memory": {"size": 300}}),
        ("official", "mnp_official", {"name": "mnp_official", "decoder": {"train": False}, "memory": {"size": 300}}),
    ]:
        _fake_run(tmp_path, name, 0, {"val/nll": 0.5}, model=model)
        data = {"full_batches": name == "official", "scale_test_separately": name == "official", "val_fraction": 0.2}
        (tmp_path / f"{name}_s0" / "config.yaml").write_text(yaml.safe_dump({"model": cfg, "dataset": data}))
    base, official = (r for r in sorted(load([str(tmp_path)])[0], key=lambda r: r.model))
    assert select.rival_setting(official, base) == "dataset.full_batches=True,model.decoder.train=False"


def test_infer_from_model_is_refused_by_decide(tmp_path, capsys):
    _fake_run(tmp_path, "base", 0, {"val/nll": 0.5})
    args = ["decide", str(tmp_path), "--model", "mnp", "--dataset", "cub", "--decision", "d", "--match", "x"]
    assert select.main([*args, "--from-model", "mnp_official", "--out", str(tmp_path / "o.csv")]) == 2
    assert "--from-model names the runs infer scores" in capsys.readouterr().err


def test_decide_uses_the_seeds_all_candidates_share(tmp_path):
    rows = select.decide(
        {"default": {0: {"val/nll": 1.0}, 1: {"val/nll": 3.0}}, "x=1": {1: {"val/nll": 2.0}}}, "val/nll", False
    )
    assert {r["candidate"]: (r["seeds"], r["score"]) for r in rows} == {"default": ("1", 3.0), "x=1": ("1", 2.0)}
    with pytest.raises(select.SelectionError, match="share no seed"):
        select.decide({"default": {0: {"val/nll": 1.0}}, "x=1": {1: {"val/nll": 2.0}}}, "val/nll", False)


@pytest.mark.slow
def test_device_selection_jobs_compose_and_validate(tmp_path):
    """Every job of benchmarks/device/jobs.py's screens and rival runs is a valid selection run on validation rows."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks" / "device"))
    from jobs import RIVAL, SCREENS, screen_jobs

    jobs = [job for d in SCREENS for job in screen_jobs(d, [0])] + [
        f"experiment=select model={RIVAL} dataset=pie seed=0"
    ]
    assert len(jobs) == len(set(jobs)) > 10
    for job in jobs:
        cfg = compose_train(tmp_path, job.split())
        validate(cfg)
        assert cfg.eval.split == "val" and cfg.dataset.val_fraction == 0.2 and cfg.model.name in ("mnp", RIVAL)


@pytest.mark.slow
def test_infer_scores_each_view_weighting_variant_on_the_same_checkpoints(tmp_path, one_thread):
    """``select infer`` on two tiny MNP selection runs: one record row per variant (eq. 8 and eq. 8′ over the q × p
    grid), the variants score differently (each is applied, not the setting the model was built with), and eq. 8
    is the default of models trained without the weighting."""
    for seed in (0, 1):
        overrides = ["model=mnp", "experiment=select", "trainer.max_epochs=2", "callbacks.checkpoint.every_n_epochs=1"]
        overrides += ["dataset.num_views=2", f"seed={seed}"]
        train(compose_train(tmp_path / "runs" / f"mnp_synthetic_s{seed}", overrides))
    out = tmp_path / "mnp_synthetic.csv"
    args = ["infer", str(tmp_path / "runs"), "--model", "mnp", "--dataset", "synthetic", "--decision", "view_weighting"]
    assert select.main([*args, "--criterion", "val/noise/acc_mean", "--higher", "--out", str(out)]) == 0
    rows = {r["candidate"]: r for r in csv.DictReader(out.open())}
    assert len(rows) == len(select.view_weighting_variants()) and "default" in rows
    assert "view_weighting=none" not in rows and all(r["seeds"] == "0 1" for r in rows.values())
    ece = {c: float(r["val/noise/ece_mean"]) for c, r in rows.items()}
    powers = [ece[f"view_weighting=distance q=0.99 p={p:g}"] for p in select.POWERS]
    assert len(set(powers)) == len(powers) and ece["default"] not in powers, ece
    wide = tmp_path / "wide.csv"  # a grid of the caller's (scene15.sh widens it)
    grid = ["--quantiles", "0.5", "0.99", "--powers", "4"]
    assert select.main([*args, *grid, "--criterion", "val/noise/acc_mean", "--higher", "--out", str(wide)]) == 0
    rows = {r["candidate"]: r for r in csv.DictReader(wide.open())}
    assert set(rows) == {"default", "view_weighting=distance q=0.5 p=4", "view_weighting=distance q=0.99 p=4"}
    assert rows["view_weighting=distance q=0.5 p=4"]["setting"].endswith(
        "quantile=0.5,model.aggregation.view_weighting.power=4.0"
    )
    samples = tmp_path / "samples.csv"  # the decoder's S at prediction, on the same checkpoints
    assert select.main([*args, "--samples", "1", "5", "12", "--criterion", "val/nll", "--out", str(samples)]) == 0
    rows = {r["candidate"]: r for r in csv.DictReader(samples.open())}
    assert set(rows) == {"default", "eval_samples=1", "eval_samples=12"}  # S = 5, num_samples, is the default
    assert rows["eval_samples=12"]["setting"] == "model.decoder.eval_samples=12"
    assert rows["default"]["setting"] == "model.decoder.eval_samples=null"  # as conf/ holds it: num_samples, S = 5
    assert len({rows[c]["val/nll"] for c in rows}) == 3  # each S is applied
    unlisted = tmp_path / "unlisted.csv"  # the runs' own S (5) not among those asked: scored as the default anyway
    assert select.main([*args, "--samples", "1", "12", "--criterion", "val/nll", "--out", str(unlisted)]) == 0
    again = {r["candidate"]: r for r in csv.DictReader(unlisted.open())}
    assert set(again) == set(rows) and again["default"]["setting"] == "model.decoder.eval_samples=null"
    assert all(again[c]["val/nll"] == rows[c]["val/nll"] for c in rows)  # the same checkpoints, the same scores
    # --from-model: another model's record (mnp_official chose by its `configuration`), scored on these runs
    other = [a if a != "mnp" else "mnp_official" for a in args]
    mine = tmp_path / "from.csv"
    assert (
        select.main([*other, "--samples", "12", "--criterion", "val/nll", "--out", str(mine)]) == 2
    )  # none of its own
    assert (
        select.main(
            [*other, "--from-model", "mnp", "--samples", "5", "12", "--criterion", "val/nll", "--out", str(mine)]
        )
        == 0
    )
    scored = {r["candidate"]: r for r in csv.DictReader(mine.open())}
    assert {r["model"] for r in scored.values()} == {"mnp_official"}
    assert scored["eval_samples=12"]["val/nll"] == rows["eval_samples=12"]["val/nll"]  # the same runs, the same score


@pytest.mark.slow
def test_infer_refuses_a_checkpoint_short_of_the_runs_end(tmp_path, one_thread, capsys):
    """A run of 3 epochs checkpointed every 2 keeps epoch 2 in last.ckpt: scoring it would not score the run."""
    overrides = ["model=mnp", "experiment=select", "trainer.max_epochs=3", "callbacks.checkpoint.every_n_epochs=2"]
    train(compose_train(tmp_path / "runs" / "mnp_synthetic_s0", [*overrides, "dataset.num_views=2", "seed=0"]))
    out = tmp_path / "mnp_synthetic.csv"
    args = ["infer", str(tmp_path / "runs"), "--model", "mnp", "--dataset", "synthetic", "--decision", "view_weighting"]
    assert select.main([*args, "--out", str(out)]) != 0 and not out.exists()
    assert "holds epoch 2 of the run's 3" in capsys.readouterr().err
    # the shared guard of select infer, benchmarks/view_weighting.py and benchmarks/research/view_conflict.py
    from mnp.cli.errors import UnfinishedRun
    from mnp.cli.run_loading import load_finished_run

    with pytest.raises(UnfinishedRun, match="holds epoch 2 of the run's 3"):
        load_finished_run(tmp_path / "runs" / "mnp_synthetic_s0")


def test_a_trainer_setting_is_recorded_with_its_value(tmp_path):
    """A decision over ``trainer.max_epochs`` (MGP's epochs) records each candidate's epochs, the default's too."""
    for seed, (base, longer) in enumerate([(0.03, 0.02), (0.031, 0.025)]):
        for variant, epochs, nll in ((None, 10, base), ("trainer.max_epochs=50", 50, longer)):
            name = "default" if variant is None else variant
            _fake_run(tmp_path, name, seed, {"val/nll": nll}, variant)
            config = tmp_path / f"{name}_s{seed}" / "config.yaml"
            config.write_text(yaml.safe_dump({"variant": variant, "trainer": {"max_epochs": epochs}}))
    out = tmp_path / "d.csv"
    args = ["decide", str(tmp_path), "--model", "mnp", "--dataset", "cub", "--decision", "epochs"]
    assert select.main([*args, "--match", "trainer.max_epochs=", "--out", str(out)]) == 0
    rows = {r["candidate"]: r for r in csv.DictReader(out.open())}
    assert rows["default"]["setting"] == "trainer.max_epochs=10" and rows["default"]["chosen"] == "False"
    assert (
        rows["trainer.max_epochs=50"]["setting"] == "trainer.max_epochs=50"
        and rows["trainer.max_epochs=50"]["chosen"] == "True"
    )


def test_a_switch_added_after_the_defaults_runs_reads_as_its_built_in_default_in_the_record(tmp_path):
    """The defaults' runs predate model.loss.label_smoothing (their config lacks it): they ran with the part's
    built-in default, 0.0, and the record says so (tests/test_decisions.py checks conf/ against it)."""
    _sweep(tmp_path, {"default": [0.50, 0.52, 0.47], "model.loss.label_smoothing=0.1": [0.55, 0.51, 0.49]})
    for config in tmp_path.glob("*/config.yaml"):  # MNP runs (their model node names the class)
        saved = yaml.safe_load(config.read_text())
        saved["model"]["_target_"] = MNP_TARGET
        config.write_text(yaml.safe_dump(saved))
    out = tmp_path / "mnp_cub.csv"
    args = ["decide", str(tmp_path), "--model", "mnp", "--dataset", "cub", "--decision", "label_smoothing"]
    assert select.main([*args, "--match", "label_smoothing", "--out", str(out)]) == 0
    rows = {r["candidate"]: r for r in csv.DictReader(out.open())}
    assert (
        rows["default"]["setting"]
        == f"model.loss.label_smoothing={LossPart().label_smoothing}"
        == ("model.loss.label_smoothing=0.0")
    )
