"""The selection scripts of benchmarks/selection/ (bash), run with a stand-in ``python`` that records its argument
lists: every training job they launch is a valid experiment=select run, and every decision writes its dataset's
record."""

from __future__ import annotations

import os
import subprocess

import pytest
from cfg_utils import ROOT, compose_train

from mnp.cli.validate import validate

SCRIPTS = {"pie": (4, 3), "scene15": (4, 3), "digits_c": (2, 5)}  # dataset -> (candidates, seeds) of its train stage


def calls(tmp_path, dataset: str, stage: str) -> list[list[str]]:
    """The ``python`` argument lists that ``benchmarks/selection/<dataset>.sh <stage>`` runs."""
    shim, log = tmp_path / "bin", tmp_path / f"{dataset}_{stage}.log"
    shim.mkdir(exist_ok=True)
    (shim / "python").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (shim / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    script = ROOT / "benchmarks" / "selection" / f"{dataset}.sh"
    subprocess.run(["bash", str(script), stage, str(tmp_path / "logs")], cwd=ROOT, env=env, check=True)
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("dataset", sorted(SCRIPTS))
def test_a_selection_script_trains_valid_selection_runs_and_decides_into_its_record(tmp_path, dataset):
    jobs = calls(tmp_path, dataset, "train")
    candidates, seeds = SCRIPTS[dataset]
    assert len(jobs) == candidates * seeds and all(j[0] == "train.py" for j in jobs)
    assert all(sum(a.startswith("seed=") for a in j) == 1 for j in jobs)  # one job a line
    assert all(f"paths.log_dir={tmp_path / 'logs'}" in j for j in jobs)
    for job in (j for j in jobs if "seed=0" in j):  # each candidate once
        cfg = compose_train(tmp_path, [a for a in job[1:] if not a.startswith("paths.log_dir=")])
        validate(cfg)
        assert cfg.eval.split == "val" and cfg.dataset.name == dataset and cfg.model.name == "mnp"
    variants = {" ".join(a for a in j[1:] if not a.startswith(("seed=", "paths."))) for j in jobs}
    assert len(variants) == candidates  # every candidate at every seed
    decisions = calls(tmp_path, dataset, "decide")
    assert decisions and all(d[:3] == ["-m", "mnp.tools.select", d[2]] for d in decisions)
    assert all(d[d.index("--out") + 1] == f"results/decisions/mnp_{dataset}.csv" for d in decisions)
    # eq. 8′ last, on the chosen setting's checkpoints (Digits-C keeps eq. 8, the paper's, and its 17 epochs leave
    # no end-state checkpoint at every_n_epochs=5)
    assert [d[2] for d in decisions][-1] == ("decide" if dataset == "digits_c" else "infer")


@pytest.mark.parametrize("dataset", ["cub", "handwritten"])
def test_the_older_selection_scripts_write_their_records(tmp_path, dataset):
    if dataset == "cub":  # its views stage: three candidates at seeds 0-3, one line each (no "" joined to the next)
        jobs = calls(tmp_path, dataset, "views")
        trained = [j for j in jobs if j[0] == "train.py"]
        assert len(trained) == 12 and len({" ".join(j) for j in trained}) == 12
        assert all(sum(a.startswith("seed=") for a in j) == 1 for j in trained)
    decisions = calls(tmp_path, dataset, "decide")
    assert decisions and decisions[-1][2] == "infer"
    assert all(d[d.index("--out") + 1] == f"results/decisions/mnp_{dataset}.csv" for d in decisions)


@pytest.mark.parametrize("dataset, seeds", [("cub", 4), ("handwritten", 5), ("pie", 3), ("scene15", 3)])
def test_the_official_stage_weighs_the_authors_configuration_against_the_defaults(tmp_path, dataset, seeds):
    jobs = calls(tmp_path, dataset, "official")
    trained = [j for j in jobs if j[0] == "train.py"]
    assert len(trained) == seeds and len({" ".join(j) for j in trained}) == seeds
    cfg = compose_train(tmp_path, [a for a in trained[0][1:] if not a.startswith("paths.log_dir=")])
    validate(cfg)
    assert cfg.eval.split == "val" and cfg.model.name == "mnp_official" and cfg.dataset.name == dataset
    (decision,) = [j for j in jobs if j[0] == "-m"]
    assert decision[decision.index("--decision") + 1] == "configuration"
    assert decision[decision.index("--rival") + 1] == "mnp_official"
    assert decision[decision.index("--out") + 1] == f"results/decisions/mnp_{dataset}.csv"


@pytest.mark.parametrize("dataset", ["cub", "handwritten", "pie", "scene15"])
def test_the_samples_stage_scores_the_decoders_s_on_checkpoints(tmp_path, dataset):
    (decision,) = calls(tmp_path, dataset, "samples")
    assert decision[2] == "infer" and decision[decision.index("--decision") + 1] == "eval_samples"
    assert decision[decision.index("--samples") + 1 : decision.index("--samples") + 4] == ["5", "10", "20"]
    assert decision[decision.index("--out") + 1] == f"results/decisions/mnp_{dataset}.csv"


def test_cubs_tuned_stage_scores_inference_on_the_tuned_defaults_checkpoints(tmp_path):
    """Issue 44: eq. 8′'s q, p and the decoder's S chosen again on checkpoints of the tuned defaults, into a record
    of their own."""
    jobs = calls(tmp_path, "cub", "tuned")
    trained = [j for j in jobs if j[0] == "train.py"]
    assert len(trained) == 5 and all(len([a for a in j if not a.startswith(("seed=", "paths."))]) == 4 for j in trained)
    cfg = compose_train(tmp_path, [a for a in trained[0][1:] if not a.startswith("paths.log_dir=")])
    validate(cfg)
    assert cfg.eval.split == "val" and cfg.tuned_from.startswith("results/tuning/mnp_cub.csv")
    decisions = [j for j in jobs if j[0] == "-m"]
    assert [(d[2], d[d.index("--decision") + 1]) for d in decisions] == [
        ("infer", "view_weighting"),
        ("infer", "eval_samples"),
    ]
    assert all(d[d.index("--out") + 1] == "results/decisions/mnp_cub_tuned.csv" for d in decisions)


def test_scene15_weighs_the_authors_configuration_then_scores_inference_on_its_checkpoints(tmp_path):
    """Scene15's decision `configuration` chose mnp_official: the screen's rows defer to it, and eq. 8′ and the
    prediction's S are scored on mnp_official's checkpoints."""
    decisions = calls(tmp_path, "scene15", "decide")
    statuses = {d[d.index("--decision") + 1]: d[d.index("--status") + 1] for d in decisions if "--status" in d}
    assert statuses == dict.fromkeys(["modality_mask", "warmup_lr", "view_dropout"], "screen")  # split on blanks
    (configuration,) = [d for d in decisions if "--rival" in d]
    assert configuration[configuration.index("--base") + 1] == "model.aggregation.view_dropout=0.25"
    for last in (decisions[-1], calls(tmp_path, "scene15", "samples")[0]):
        assert last[2] == "infer" and last[last.index("--from-model") + 1] == "mnp_official"


def test_cubs_calibration_stage_screens_three_candidates_and_decides_each_by_val_ece_at_p_005(tmp_path):
    jobs = calls(tmp_path, "cub", "calibration")
    trained = [j for j in jobs if j[0] == "train.py"]
    assert len(trained) == 20 and len({" ".join(j) for j in trained}) == 20  # 4 settings x seeds 0-4
    for job in (j for j in trained if "seed=0" in j):
        cfg = compose_train(tmp_path, [a for a in job[1:] if not a.startswith("paths.log_dir=")])
        validate(cfg)
        assert cfg.eval.split == "val" and cfg.model.name == "mnp"
    decisions = [j for j in jobs if j[0] == "-m"]
    assert [d[d.index("--decision") + 1] for d in decisions] == ["scale_floor", "loss_alpha", "train_samples"]
    for d in decisions:
        assert d[d.index("--criterion") + 1] == "val/ece" and d[d.index("--require-p") + 1] == "0.05"
        assert d[d.index("--out") + 1] == "results/decisions/mnp_cub.csv"


def test_cubs_confirm_stage_replicates_the_closest_miss_on_fresh_seeds(tmp_path):
    jobs = calls(tmp_path, "cub", "confirm")
    trained = [j for j in jobs if j[0] == "train.py"]
    assert sorted(a for j in trained for a in j if a.startswith("seed=")) == [
        f"seed={s}" for s in (5, 5, 6, 6, 7, 7, 8, 8, 9, 9)
    ]
    assert {" ".join(a for a in j[1:] if a.startswith("model.")) for j in trained} == {"", "model.loss.alpha=0.3"}
    (decision,) = [j for j in jobs if j[0] == "-m"]
    assert decision[decision.index("--decision") + 1] == "loss_alpha_replication"
    assert (
        decision[decision.index("--criterion") + 1] == "val/ece"
        and decision[decision.index("--require-p") + 1] == "0.05"
    )


def test_cubs_sharpness_stage_screens_label_smoothing_and_weight_decay_by_val_ece_at_p_005(tmp_path):
    jobs = calls(tmp_path, "cub", "sharpness")
    trained = [j for j in jobs if j[0] == "train.py"]
    assert len(trained) == 20 and len({" ".join(j) for j in trained}) == 20  # 4 settings x seeds 0-4
    assert {" ".join(a for a in j[1:] if a.startswith("model.")) for j in trained} == {
        "",
        "model.loss.label_smoothing=0.05",
        "model.loss.label_smoothing=0.1",
        "model.loss.l2=0.1",
    }
    for job in (j for j in trained if "seed=0" in j):
        cfg = compose_train(tmp_path, [a for a in job[1:] if not a.startswith("paths.log_dir=")])
        validate(cfg)
        assert cfg.eval.split == "val" and cfg.dataset.name == "cub"
    smoothing, decay = [j for j in jobs if j[0] == "-m"]
    assert smoothing[smoothing.index("--decision") + 1] == "label_smoothing"
    assert decay[decay.index("--decision") + 1] == "weight_decay"
    for d in (smoothing, decay):
        assert d[d.index("--criterion") + 1] == "val/ece" and d[d.index("--require-p") + 1] == "0.05"


def _refused(tmp_path, script: str, args: list[str], cwd=ROOT) -> list[str]:
    """The stderr lines of a selection script that must refuse (status 2) before it runs any ``python``."""
    shim, log = tmp_path / "bin", tmp_path / "python.log"
    shim.mkdir(exist_ok=True)
    (shim / "python").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (shim / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    path = ROOT / "benchmarks" / "selection" / script
    done = subprocess.run(["bash", str(path), *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 2 and not log.exists(), (done.returncode, done.stderr)
    return done.stderr.strip().splitlines()


@pytest.mark.parametrize(
    "script, stages",
    [
        ("cub.sh", "train views calibration sharpness confirm samples official tuned decide"),
        ("handwritten.sh", "train samples official decide"),
        ("pie.sh", "train samples official decide"),
        ("scene15.sh", "train samples official decide"),
        ("digits_c.sh", "train decide"),
        ("baselines.sh", "train decide"),
    ],
)
def test_an_unknown_stage_is_refused_naming_the_stages(tmp_path, script, stages):
    """SH1: ``cub.sh bogus DIR`` ran the decide stage."""
    for stage in ("bogus", "train views"):
        assert _refused(tmp_path, script, [stage, str(tmp_path / "logs")]) == [
            f"error: unknown stage '{stage}' of {script}; its stages: {stages}"
        ]


def test_a_selection_script_refuses_to_run_outside_the_repository_root(tmp_path):
    """SH4: from another folder every job would fail to find train.py."""
    script = ROOT / "benchmarks" / "selection" / "cub.sh"
    assert _refused(tmp_path, "cub.sh", ["views", "../nonexistent"], cwd=tmp_path) == [
        f"error: run {script} from the repository root (where train.py and results/decisions/ are), not from {tmp_path}"
    ]
