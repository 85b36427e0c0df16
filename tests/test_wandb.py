"""logger=wandb, for real and offline (no mocks): real train.py runs write offline wandb runs, which are read
back from their run directories (tests/wandb_records.py). One run per job of a multirun, named after its run
directory and grouped by experiment × model × dataset × variant; the whole resolved config, nested; the
per-epoch loss components and MNP's warm-up phase; the summary metrics; the test-time tables with their
charts; the report's aggregate as a run of its own."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from wandb_records import OfflineRun, offline_runs

from mnp.cli.wandb_utils import run_id, summary_items

pytestmark = pytest.mark.slow  # module fixtures train whole runs

pytest.importorskip("wandb")
ROOT = Path(__file__).resolve().parents[1]
MLP_VARIANT = "dataset.num_views=2,trainer.max_epochs=2"


def offline_env(tmp: Path) -> dict:
    env = dict(os.environ, WANDB_MODE="offline", WANDB_DIR=str(tmp / "wandb"))
    env.pop("WANDB_SILENT", None)  # wandb's own warnings stay visible: the run must not cause any
    return env


def train(tmp: Path, *args: str, multirun: bool = False) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "train.py",
        *(["-m"] if multirun else []),
        "logger=wandb",
        "trainer.enable_progress_bar=false",
        f"paths.log_dir={tmp / 'logs'}",
        "experiment_name=wb",
        *args,
    ]
    res = subprocess.run(cmd, cwd=ROOT, env=offline_env(tmp), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "anonymous" not in res.stdout + res.stderr  # wandb's "The anonymous setting has no effect"
    return res


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("wandb")


@pytest.fixture(scope="module")
def mlp_jobs(tmp) -> list[Path]:
    """An mlp multirun, seeds 0 and 1: two jobs."""
    train(
        tmp, "model=mlp", "dataset=synthetic", "dataset.num_views=2", "trainer.max_epochs=2", "seed=0,1", multirun=True
    )
    return [tmp / "logs" / "wb" / "multiruns" / f"mlp_synthetic_s{seed}_{MLP_VARIANT}" for seed in (0, 1)]


@pytest.fixture(scope="module")
def mnp_job(tmp) -> Path:
    """MNP on 3 classes in 2 views, class 2 held out as OOD; 1 warm-up epoch and 2 main ones, with L2."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 40)
    data = tmp / "views.npz"
    np.savez(data, x1=rng.normal(size=(120, 6)) + 2.0 * y[:, None], x2=rng.normal(size=(120, 4)) + y[:, None], y=y)
    train(
        tmp,
        "model=mnp",
        "dataset=custom",
        f"dataset.path={data}",
        "dataset.ood_classes=[2]",
        "model.encoder.d_e=16",
        "model.warmup.epochs=1",
        "model.loss.l2=1e-4",
        "trainer.max_epochs=3",
        "eval.noise_levels=[0.1,1.0]",
        "+variant=tiny",
    )
    [job] = (tmp / "logs" / "wb" / "runs").glob("mnp_custom_s0_*")
    return job


def only_run(job: Path) -> OfflineRun:
    runs = offline_runs(job / "wandb")
    assert len(runs) == 1, runs  # wandb.finish() after each job: a fresh run per job
    return runs[0]


def test_summary_items_keeps_finite_numbers_and_strings():
    got = summary_items({"test/acc": 0.9, "seed": 1, "model": "mnp", "x": math.nan, "flag": True, "none": None})
    assert got == {"test/acc": 0.9, "seed": 1, "model": "mnp"}


def test_runs_are_named_after_their_directory_and_grouped_by_experiment_model_dataset_variant(mlp_jobs, mnp_job):
    runs = [only_run(job) for job in mlp_jobs]
    for seed, (job, run) in enumerate(zip(mlp_jobs, runs)):
        assert run.info.display_name == job.name == f"mlp_synthetic_s{seed}_{MLP_VARIANT}"
        assert run.info.run_group == f"wb/mlp_synthetic_{MLP_VARIANT}"  # the seeds of one cell share it
        assert run.info.job_type == "train" and set(run.info.tags) == {"mlp", "synthetic", "wb"}
    assert runs[0].info.run_id != runs[1].info.run_id
    # the id is the run directory's, so a resumed session logs to the same wandb run
    assert [run.info.run_id for run in runs] == [run_id(job) for job in mlp_jobs] and run_id(mlp_jobs[0]) == run_id(
        str(mlp_jobs[0]) + "/."
    )
    run = only_run(mnp_job)
    # a custom file's runs are grouped by the file's stem, as the report's cells are
    assert run.info.display_name == mnp_job.name and run.info.run_group == "wb/mnp_views_tiny"
    assert set(run.info.tags) == {"mnp", "custom", "views", "wb"}


def test_the_whole_resolved_config_is_logged_nested(mlp_jobs, mnp_job):
    for seed, job in enumerate(mlp_jobs):
        config = only_run(job).config
        saved = yaml.safe_load((job / "config.yaml").read_text())
        assert {k for k in config if not k.startswith("_wandb")} == set(saved)  # no model hyperparameter on top
        assert config["model"] == saved["model"] and config["dataset"] == saved["dataset"]
        assert config["model"]["name"] == "mlp" and config["dataset"]["name"] == "synthetic"
        assert config["dataset"]["batch_size"] == 200 and config["dataset"]["num_views"] == 2
        assert (config["seed"], config["experiment_name"], config["variant"]) == (seed, "wb", MLP_VARIANT)
    config = only_run(mnp_job).config
    assert (
        config["model"]["loss"]["l2"] == 1e-4
        and config["model"]["warmup"]["epochs"] == 1
        and config["variant"] == "tiny"
    )
    assert config["dataset"]["path"] == str(mnp_job.parents[3] / "views.npz")
    assert config["dataset"]["scaling"] == "standard"


def test_the_history_holds_each_epochs_loss_components_and_mnps_phase(mlp_jobs, mnp_job):
    run = only_run(mlp_jobs[0])
    assert run.epochs("epoch") == [0, 1]
    assert all(v is not None for v in run.epochs("train/loss") + run.epochs("train/acc"))
    run = only_run(mnp_job)
    assert run.epochs("epoch") == [0, 1, 2]
    assert run.epochs("train/phase") == [0, 1, 1]  # the warm-up minimises L_RBF alone
    assert all(v is not None for v in run.epochs("train/rbf") + run.epochs("train/loss"))
    for key in ("train/ty", "train/l2", "train/acc"):
        assert run.epochs(key)[0] is None and all(v is not None for v in run.epochs(key)[1:]), key
    ty, rbf, l2, loss = (run.epochs(k)[1:] for k in ("train/ty", "train/rbf", "train/l2", "train/loss"))
    assert np.allclose(np.add(np.add(ty, rbf), l2), loss, rtol=1e-5)  # L = L_TY + β L_RBF + L2, β = 1


def test_summary_tables_and_charts(mlp_jobs, mnp_job):
    run = only_run(mlp_jobs[0])
    metrics = json.loads((mlp_jobs[0] / "metrics.json").read_text())
    for key in ("test/acc", "test/ece", "noise/acc_mean", "time/train_epoch_s", "missing/acc@v0"):
        assert run.summary[key] == pytest.approx(metrics[key]), key
    assert run.summary["model"] == "mlp" and run.summary["seed"] == 0
    tables = run.tables()
    assert {k for k in tables if k.startswith("tables/")} == {"tables/noise", "tables/missing", "tables/reliability"}
    assert tables["charts/noise/acc_table"] == tables["tables/noise"]  # a chart's data: its own table
    images = {p.name.split("_")[0] for p in (run.path / "files" / "media" / "images" / "plots").glob("*.png")}
    assert images == {"reliability", "noise"}
    assert (mlp_jobs[0] / "reliability.png").is_file() and (mlp_jobs[0] / "noise.png").is_file()

    run = only_run(mnp_job)
    metrics = json.loads((mnp_job / "metrics.json").read_text())
    tables = run.tables()
    noise = tables["tables/noise"]
    assert noise["columns"] == ["sigma", "acc", "ece"] and [r[0] for r in noise["data"]] == [0.1, 1.0]
    assert noise["data"][1][1:] == pytest.approx([metrics["noise/acc@1"], metrics["noise/ece@1"]])
    missing = tables["tables/missing"]
    assert missing["columns"] == ["removed", "acc", "ece"] and [r[0] for r in missing["data"]] == ["none", "v0", "v1"]
    assert missing["data"][2][1:] == pytest.approx([metrics["missing/acc@v1"], metrics["missing/ece@v1"]])
    assert tables["tables/ood"] == {
        "columns": ["ood_set", "auroc", "aupr", "fpr95"],
        "data": [["heldout", *(metrics[f"ood/heldout/{k}"] for k in ("auroc", "aupr", "fpr95"))]],
    }
    assert {"test/aurc", "test/acc@cov90", "test/ece_adaptive", "ood/heldout/fpr95@msp"} <= set(run.summary)
    rel = tables["tables/reliability"]
    assert rel["columns"] == ["bin", "lo", "hi", "confidence", "accuracy", "count"] and len(rel["data"]) == 15
    with np.load(mnp_job / "predictions.npz") as z:
        assert sum(r[5] for r in rel["data"]) == len(z["test/labels"])
    charts = run.charts()
    assert set(charts) == {
        "charts/noise/acc",
        "charts/noise/ece",
        "charts/missing/acc",
        "charts/missing/ece",
        "charts/ood/auroc",
        "charts/ood/aupr",
        "charts/ood/fpr95",
        "charts/reliability/accuracy",
    }
    assert charts["charts/noise/acc"]["panel_config"]["panelDefId"] == "wandb/line/v0"
    assert charts["charts/ood/auroc"]["panel_config"]["panelDefId"] == "wandb/bar/v0"


def test_the_report_pushes_its_aggregate_as_a_run_of_its_own(tmp, mlp_jobs, mnp_job):
    out = tmp / "report"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "mnp.tools.report",
            str(tmp / "logs" / "wb"),
            "--out",
            str(out),
            "--no-plots",
            "--wandb-project",
            "mnp",
        ],
        cwd=ROOT,
        env=offline_env(tmp),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    [run] = offline_runs(out / "wandb")
    assert (run.info.display_name, run.info.run_group, run.info.job_type) == ("report_wb", "wb/report", "report")
    tables = run.tables()
    results = tables["report/results"]
    assert results["columns"] == ["experiment", "model", "variant", "dataset", "group", "metric", "mean", "std", "n"]
    groups = {only_run(job).info.run_group for job in [*mlp_jobs, mnp_job]}
    assert {row[4] for row in results["data"]} == groups  # the cells join the training runs on their group
    acc = {row[0]: row[1:] for row in tables["report/test/acc"]["data"]}
    seeds = [json.loads((job / "metrics.json").read_text())["test/acc"] for job in mlp_jobs]
    assert acc[f"wb/mlp_synthetic_{MLP_VARIANT}"] == pytest.approx([np.mean(seeds), np.std(seeds, ddof=1), 2])
    assert "report/ood/heldout/auroc" in tables and "charts/test/acc/mean" in run.charts()


def test_wandb_mode_decides_the_mode_and_no_anonymous_setting_reaches_wandb(tmp_path, monkeypatch, capfd):
    """WANDB_MODE (here disabled) is the run's mode: Lightning's ``offline: true`` forced WANDB_MODE=dryrun."""
    import wandb
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from mnp.cli.builders import build_loggers

    monkeypatch.setenv("WANDB_MODE", "disabled")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"paths.output_dir={tmp_path / 'mlp_synthetic_s0'}",
                "logger=wandb",
                "model=mlp",
                "dataset=synthetic",
            ],
        )
    [logger] = build_loggers(cfg)
    try:
        assert logger.experiment.disabled
    finally:
        wandb.finish()
    assert os.environ["WANDB_MODE"] == "disabled" and "anonymous" not in capfd.readouterr().err
    assert not list(tmp_path.rglob("offline-run-*"))
