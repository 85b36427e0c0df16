"""mnp.tools.report --relabel: runs labelled by today's defaults and by the experiment directory that holds them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from mnp.runs.migrations import FLAT
from mnp.runs.migrations import PART_NODES as FLAT_PART_NODES
from mnp.tools.report.relabel import defaults, variant_of
from mnp.tools.report.report import main
from mnp.tools.report.report_runs import load


def write_run(root: Path, exp_dir: str, name: str, cfg: dict, recorded_exp: str) -> Path:
    d = root / exp_dir / "multiruns" / name
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(
        json.dumps(
            {
                "model": "mnp",
                "dataset": "cub",
                "seed": 0,
                "experiment": recorded_exp,
                "test/acc": 0.9,
                "test/ece": 0.05,
                "noise/acc_mean": 0.8,
            }
        )
    )
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    return d


def saved(changes: dict | None = None) -> dict:
    """A run's saved config: today's defaults for mnp on cub, seed 0, with some model settings changed
    ({(part, setting): value})."""
    cfg = copy.deepcopy(defaults("mnp", "cub", 0, tuned=False))  # no tuned_from: set against the untuned defaults
    for (part, setting), value in (changes or {}).items():
        cfg["model"][part][setting] = value
    return cfg


def test_variant_is_the_drift_from_todays_defaults_with_the_runs_values():
    current = defaults("mnp", "cub", 0, tuned=False)
    assert variant_of(saved(), "mnp", "cub", 0) is None
    old_lr = current["model"]["warmup"]["lr"] / 10
    assert (
        variant_of(saved({("warmup", "lr"): old_lr, ("aggregation", "modality_mask"): False}), "mnp", "cub", 0)
        == f"model.aggregation.modality_mask=False,model.warmup.lr={old_lr}"
    )
    # keys that cannot change a result are not a variant, nor a switch the old run did not know yet
    cfg = saved()
    cfg["dataset"]["data_dir"] = "/elsewhere"
    cfg["trainer"]["accelerator"] = "gpu"
    del cfg["model"]["memory"]["write"]
    assert variant_of(cfg, "mnp", "cub", 0) is None
    assert variant_of(saved(), "mnp", "cub", 1) == "dataset.seed=0"  # the seed's own data split differs


def test_a_run_at_the_tuned_defaults_is_set_against_them_and_an_untuned_run_against_the_untuned_ones():
    tuned = {**copy.deepcopy(defaults("mnp", "cub", 0)), "tuned_from": "results/tuning/mnp_cub.csv (trial 18)"}
    assert tuned["model"]["loss"]["alpha"] != saved()["model"]["loss"]["alpha"]  # the premise: CUB's study applied
    assert variant_of(tuned, "mnp", "cub", 0) is None
    assert variant_of(saved(), "mnp", "cub", 0) is None
    alpha = saved()["model"]["loss"]["alpha"]
    assert f"model.loss.alpha={alpha}" in variant_of(saved(), "mnp", "cub", 0, tuned=True).split(",")


def test_a_switch_added_after_the_run_counts_at_its_built_in_default_not_the_datasets():
    """CUB's view dropout (0.25) came after runs that lacked the key: they ran without it (the built-in 0.0), so
    they are a variant of today's CUB defaults, not default runs; where today's default is the built-in one, a
    run lacking the key stays a default run."""
    assert defaults("mnp", "cub", 0, tuned=False)["model"]["aggregation"]["view_dropout"] == 0.25  # the premise
    cfg = saved()
    del cfg["model"]["aggregation"]["view_dropout"]
    assert variant_of(cfg, "mnp", "cub", 0) == "model.aggregation.view_dropout=0.0"
    pie = copy.deepcopy(defaults("mnp", "pie", 0))
    assert pie["model"]["aggregation"]["view_dropout"] == 0.0
    del pie["model"]["aggregation"]["view_dropout"]
    assert variant_of(pie, "mnp", "pie", 0) is None


def test_a_run_saved_before_the_parts_is_labelled_by_its_settings_not_its_key_names():
    """A config.yaml with MNP's flat keys (written before mnp.model.parts) is today's default run when its settings are."""
    cfg = saved()
    flat = {k: v for k, v in cfg["model"].items() if k not in FLAT_PART_NODES}
    for key, (path, setting) in FLAT.items():
        node = cfg["model"]
        for p in path.split("."):
            node = node.get(p, {})
        if setting in node:
            flat[key] = node[setting]
    flat["optim"] = {k: v for k, v in cfg["model"]["optim"].items() if k not in ("clip_norm", "lengthscale_lr_scale")}
    old = {**cfg, "model": flat}
    assert "memory_size" in old["model"] and "memory" not in old["model"]
    assert variant_of(old, "mnp", "cub", 0) is None
    old["model"]["memory_size"] += 1
    assert variant_of(old, "mnp", "cub", 0) == f"model.memory.size={old['model']['memory_size']}"


def test_report_relabels_runs_after_a_default_changed(tmp_path):
    """A switch run whose override became the default counts as a default run of the experiment that
    holds it; the old default run, moved among the switches, becomes the variant it now is."""
    lr = defaults("mnp", "cub", 0)["model"]["warmup"]["lr"]
    new = saved()
    new["variant"] = f"model.warmup.lr={lr}"  # as recorded when it ran as a switch
    write_run(tmp_path, "paper_main", "mnp_cub_s0", new, recorded_exp="switches")
    write_run(tmp_path, "switches", "mnp_cub_s0_old", saved({("warmup", "lr"): lr / 10}), recorded_exp="paper_main")
    dirs = [tmp_path / "paper_main" / "multiruns", tmp_path / "switches" / "multiruns"]

    as_recorded = {(r.experiment, r.variant) for r in load(dirs)[0]}
    assert as_recorded == {("switches", f"model.warmup.lr={lr}"), ("paper_main", None)}
    relabelled = {(r.experiment, r.variant) for r in load(dirs, relabel=True)[0]}
    assert relabelled == {("paper_main", None), ("switches", f"model.warmup.lr={lr / 10}")}

    assert main([*map(str, dirs), "--out", str(tmp_path / "out"), "--no-plots", "--relabel"]) == 0
    rows = (tmp_path / "out" / "results.csv").read_text().splitlines()
    assert any(r.startswith("mnp,cub,test/acc,") and r.endswith(",paper_main,") for r in rows)
    assert any(r.startswith("mnp,cub,test/acc,") and r.endswith(f",switches,model.warmup.lr={lr / 10}") for r in rows)
