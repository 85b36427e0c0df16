"""Run directories: named by the result-changing overrides, never reused for another config."""

import json
import subprocess
import sys

import pytest
from cfg_utils import ROOT, compose_train

from mnp.cli.pipeline import train
from mnp.runs.dirname import run_suffix
from mnp.runs.rundir import RunDirConflict, config_drift
from mnp.tools.report.report import load


def test_run_suffix_names_only_result_changing_overrides():
    overrides = [
        "model=mnp",
        "dataset=pie",
        "seed=3",
        "paths.log_dir=/x/y",
        "trainer.enable_progress_bar=false",
        "launcher=joblib",
        "logger.wandb.project=p",
        "hydra.searchpath=[file:///c]",
        "experiment=paper_main",
        "trainer.max_epochs=10",
        "model.tau=0.5",
        "+model.extra=a/b",
    ]
    assert run_suffix(overrides) == "_+model.extra=a-b,model.tau=0.5,trainer.max_epochs=10"
    assert run_suffix(overrides[:9]) == ""  # the paper sweeps keep their plain names


def test_long_suffix_is_cut_and_hashed():
    a = run_suffix([f"model.w{i}=1" for i in range(40)])
    b = run_suffix([f"model.w{i}=1" for i in range(39)] + ["model.w39=2"])
    assert len(a) == 1 + 100 and a != b and a[:50] == b[:50]


def test_config_drift_ignores_paths_and_progress_and_new_switches():
    saved = {
        "model": {"tau": 0.1, "d": 8},
        "paths": {"output_dir": "a"},
        "dataset": {"data_dir": "/a"},
        "trainer": {"enable_progress_bar": True, "max_epochs": 3},
    }
    current = {
        "model": {"tau": 0.5, "new_switch": 1},
        "paths": {"output_dir": "b"},
        "dataset": {"data_dir": "/b"},
        "trainer": {"enable_progress_bar": False, "max_epochs": 3},
    }
    assert config_drift(saved, current) == ["model.tau", "model.d"]  # changed, then removed
    assert config_drift(saved, saved) == []


def test_finished_run_of_another_config_is_never_skipped_or_resumed(tmp_path):
    base = ["model=mlp", "trainer.max_epochs=1", "eval.noise=false"]
    first = train(compose_train(tmp_path, base))
    kept = {f: (tmp_path / f).read_bytes() for f in ("metrics.json", "config.yaml", "checkpoints/last.ckpt")}
    assert train(compose_train(tmp_path, base + ["paths.log_dir=/elsewhere"])) == first  # same config: skipped
    with pytest.raises(RunDirConflict, match="differs at model.optim.lr"):
        train(compose_train(tmp_path, base + ["model.optim.lr=0.5"]))
    (tmp_path / "metrics.json").rename(tmp_path / "old_metrics.json")
    with pytest.raises(RunDirConflict, match="differs at model.optim.lr"):  # nor resumed from its last.ckpt
        train(compose_train(tmp_path, base + ["model.optim.lr=0.5"]))
    (tmp_path / "old_metrics.json").rename(tmp_path / "metrics.json")
    assert {f: (tmp_path / f).read_bytes() for f in kept} == kept  # nothing in the directory was touched


def test_a_checkpoint_without_config_yaml_is_checked_against_the_config_inside_it(tmp_path):
    base = ["model=mlp", "trainer.max_epochs=1", "eval.noise=false"]
    train(compose_train(tmp_path, base))
    (tmp_path / "metrics.json").unlink()
    (tmp_path / "config.yaml").unlink()  # a directory half-restored, or written by another process
    with pytest.raises(RunDirConflict, match="differs at model.optim.lr"):
        train(compose_train(tmp_path, base + ["model.optim.lr=0.5", "trainer.max_epochs=2"]))
    assert train(compose_train(tmp_path, base + ["trainer.max_epochs=2"]))["epochs"] == 2  # its own config resumes


@pytest.mark.slow
def test_sweep_over_a_hyperparameter_gets_one_directory_and_report_row_per_value(tmp_path):
    cmd = [
        sys.executable,
        "train.py",
        "-m",
        "model=mlp",
        "dataset=synthetic",
        "logger=none",
        "eval.noise=false",
        "trainer.enable_progress_bar=false",
        f"paths.log_dir={tmp_path}",
        "trainer.max_epochs=1,2",
    ]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    jobs = tmp_path / "default" / "multiruns"
    for epochs in (1, 2):
        m = json.loads(
            (jobs / f"mlp_synthetic_s0_eval.noise=False,trainer.max_epochs={epochs}" / "metrics.json").read_text()
        )
        assert m["epochs"] == epochs
    runs, _ = load([jobs])
    assert sorted((r.variant, r.metrics["epochs"]) for r in runs) == [
        ("eval.noise=False,trainer.max_epochs=1", 1),
        ("eval.noise=False,trainer.max_epochs=2", 2),
    ]
