"""Experiment presets, launchers, and multirun failure isolation / skipping / resuming (mnp.cli.sweep)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from datamodules.custom import CustomDataModule
from datamodules.errors import DataError, MissingData
from datamodules.features import FeatureDataModule
from mnp.cli.resolvers import register_resolver
from mnp.cli.sweep import FAILED, SKIPPED, JobFailed, is_missing_data, run_job

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
# quick: not a sweep; switches and select: the command line names the models, datasets, seeds and candidates;
# tune: a study (tests/test_tuning.py)
SWEEPS = [p for p in PRESETS if p not in ("switches", "quick", "select", "calibration", "tune")]
MODELS = {"mlp", "mnp", "mnp_official", "mcd", "de_ef", "de_lf", "sngp", "etp", "tmc", "mgp"}
DATASETS = {"synthetic", "handwritten", "cub", "pie", "caltech101", "scene15", "hmdb", "cifar10c", "digits_c", "custom"}
# K and the paper's N^m per dataset (docs/method.md §2)
CLASSES = {"handwritten": 10, "cub": 10, "pie": 68, "caltech101": 101, "scene15": 15, "hmdb": 51, "cifar10c": 10}
PAPER_NM = {"handwritten": 100, "cub": 200, "pie": 300, "caltech101": 700, "scene15": 300, "hmdb": 400, "cifar10c": 200}


@pytest.fixture(autouse=True)
def _reset_hydra():
    """compose_hydra sets the global HydraConfig; leave none behind for other tests."""
    yield
    HydraConfig.instance().cfg = None
    GlobalHydra.instance().clear()


def compose_hydra(overrides):
    """Compose train.yaml with the hydra node and make it the current HydraConfig."""
    GlobalHydra.instance().clear()
    register_resolver()  # train.py registers it when it runs
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def options(value) -> list[str]:
    return [v.strip() for v in str(value).split(",")]


# ---------------------------------------------------------------------------- presets
def test_select_preset_evaluates_on_validation_rows_in_its_own_sweep_dir():
    cfg = compose_hydra(["experiment=select", "model=mnp", "dataset=cub", "model.memory.size=300"])
    assert cfg.experiment_name == "select" and cfg.hydra.sweep.dir.endswith("/select/multiruns")
    assert not cfg.hydra.sweeper.params and cfg.eval.split == "val" and cfg.dataset.val_fraction == 0.2
    assert cfg.callbacks.checkpoint.monitor is None and cfg.model.memory.size == 300


def test_switches_preset_writes_its_own_sweep_dir_named_by_the_switch():
    cfg = compose_hydra(["experiment=switches", "model=mnp", "dataset=pie", "model.aggregation.modality_mask=true"])
    assert cfg.experiment_name == "switches" and cfg.hydra.sweep.dir.endswith("/switches/multiruns")
    assert not cfg.hydra.sweeper.params  # the command line names the models, datasets, seeds and the switch
    assert cfg.model.aggregation.modality_mask is True


@pytest.mark.parametrize("name", SWEEPS)
def test_preset_sweeps_models_datasets_five_seeds(name):
    cfg = compose_hydra([f"experiment={name}", "model=mlp", "dataset=synthetic"])
    params = cfg.hydra.sweeper.params
    assert cfg.experiment_name == name
    assert cfg.hydra.sweep.dir.endswith(f"/{name}/multiruns")
    assert params.seed == ("range(18)" if name == "paper_tuned" else "range(5)")  # paper_tuned: 0-9 and unseen 10-17
    models, datasets = options(params.model), options(params.dataset)
    assert set(models) <= MODELS and set(datasets) <= DATASETS
    for group, names in (("model", models), ("dataset", datasets)):
        for n in names:  # the sweeper refuses to launch a sweep with a missing option
            assert (CONF / group / f"{n}.yaml").is_file(), f"conf/{group}/{n}.yaml"
    variant_keys = [k for k in params if k not in ("model", "dataset", "seed")]
    if variant_keys:  # ablations: the variant is part of the job directory, so variants never collide
        assert "${variant}" in OmegaConf.to_container(cfg.hydra.sweep)["subdir"]
        assert "${variant}" in OmegaConf.to_container(cfg.hydra.run)["dir"]  # single runs too
    if name.startswith("paper_"):
        assert "mnp" in models and "mgp" in models
    if name in ("paper_main", "paper_ood", "paper_tuned"):
        assert set(models) == {"mnp", "mcd", "de_ef", "de_lf", "sngp", "etp", "tmc", "mgp"}


def test_paper_presets_cover_the_paper_tables():
    def params(name):
        return compose_hydra([f"experiment={name}", "model=mlp"]).hydra.sweeper.params

    assert options(params("paper_main").dataset) == ["handwritten", "cub", "pie", "caltech101", "scene15", "hmdb"]
    assert options(params("paper_ood").dataset) == ["cifar10c"]
    assert options(params("paper_speed").model) == ["mnp", "mgp"]
    assert options(params("ablation_context")["model.memory.update"]) == ["mse", "ce", "fifo", "random"]
    assert options(params("ablation_aggregation")["model.aggregation.kind"]) == ["mba", "mean", "concat"]
    p = params("ablation_attention")
    assert options(p["model.attention.similarity"]) == ["rbf", "dot"]
    assert options(p["model.attention.normaliser"]) == ["sparsemax", "softmax"]
    assert [float(b) for b in options(params("ablation_rbf_loss")["model.loss.beta"])] == [1.0, 0.0]


@pytest.mark.parametrize("name", [p for p in SWEEPS if p.startswith(("ablation", "context"))])
def test_ablation_overrides_are_keys_of_the_mnp_config(name):
    params = compose_hydra([f"experiment={name}", "model=mnp"]).hydra.sweeper.params
    for key, value in params.items():
        if key.startswith("model."):
            for v in options(value):  # composing fails on a key the MNP config does not have
                cfg = compose_hydra([f"experiment={name}", "model=mnp", "dataset=synthetic", f"{key}={v}"])
                assert str(OmegaConf.select(cfg, key)) == v
                assert cfg.variant is not None


def test_context_size_grid_per_dataset():
    grid = compose_hydra(["experiment=context_size", "model=mlp"]).context_grid
    for d, k in CLASSES.items():
        sizes = list(grid[d])
        assert len(sizes) == 5 and sizes == sorted(sizes) and min(sizes) >= k, d  # N_K = N^m // K >= 1
        assert PAPER_NM[d] in sizes, d
        step = sizes.index(PAPER_NM[d])
        cfg = compose_hydra(["experiment=context_size", "model=mlp", f"dataset={d}", f"context_step={step}"])
        assert cfg.model.memory.size == PAPER_NM[d] and cfg.variant == PAPER_NM[d]
        assert cfg.hydra.sweep.subdir == f"mlp_{d}_Nm{PAPER_NM[d]}_s0"


def test_launchers_compose():
    slurm = compose_hydra(["launcher=slurm", "model=mlp"]).hydra.launcher
    assert slurm._target_.endswith("SlurmLauncher")
    assert slurm.gpus_per_node == 1 and slurm.timeout_min > 0 and slurm.array_parallelism > 0
    assert "partition" in slurm
    joblib = compose_hydra(["launcher=joblib", "model=mlp"]).hydra.launcher
    assert joblib._target_.endswith("JoblibLauncher") and joblib.n_jobs >= 1
    local = compose_hydra(["launcher=submitit_local", "model=mlp"]).hydra.launcher
    assert local._target_.endswith("LocalLauncher")


def test_the_one_gpu_preset_composes_with_the_paper_sweep(monkeypatch):
    """launcher=gpu_joblib: joblib with one-thread jobs, as many as the CPU cores but one and the GPU's memory
    allow (15 on the 16-core H100 and H200 machines of docs/gpu.md)."""
    from mnp.cli import resources

    cfg = compose_hydra(["experiment=paper_main", "launcher=gpu_joblib", "model=mnp"])
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher") and cfg.torch_threads == 1
    assert cfg.hydra.launcher.n_jobs == resources.gpu_jobs() >= 1
    assert cfg.experiment_name == "paper_main" and cfg.hydra.sweeper.params.seed == "range(5)"
    monkeypatch.setattr(resources, "gpu_memory_gib", lambda: 80.0)
    monkeypatch.setattr(resources, "cpu_count", lambda: 16)
    assert compose_hydra(["launcher=gpu_joblib", "model=mnp"]).hydra.launcher.n_jobs == 15
    assert resources.gpu_jobs(cpus=16, gib=24.0) == 6 and resources.gpu_jobs(cpus=1, gib=2.0) == 1
    assert resources.gpu_jobs(cpus=4, gib=None, probe=False) == 3


@pytest.mark.parametrize(
    "cores,load,threads",
    [
        (2, 0.1, 2),
        (2, 0.4, 2),
        (2, 0.6, 1),
        (2, 1.9, 1),
        (2, 7.0, 1),  # the shared 2-core machine, idle to swamped
        (16, 0.0, 16),
        (16, 4.2, 12),
        (16, 15.6, 1),
        (1, 0.0, 1),
    ],
)
def test_a_run_given_no_thread_count_takes_the_free_cores(monkeypatch, caplog, cores, load, threads):
    """torch's default of one thread per core made runs on a busy 2-core machine 5-15× slower than one thread:
    the default is the cores free of load (rounded, at least 1); MNP_TORCH_THREADS (torch_threads) overrides."""
    import logging

    import torch

    from mnp.cli import resources

    monkeypatch.setattr(resources, "cpu_count", lambda: cores)
    monkeypatch.setattr(resources.os, "getloadavg", lambda: (load, 0.0, 0.0))
    before = torch.get_num_threads()
    try:
        with caplog.at_level(logging.INFO, logger="mnp.cli.resources"):
            assert resources.set_threads(None) == threads == torch.get_num_threads()
        assert caplog.messages == [
            f"torch threads: {threads} ({cores} cores, load {load:.1f}); MNP_TORCH_THREADS=<n> sets it"
        ]
        assert resources.set_threads(3) == 3 == torch.get_num_threads()  # the override: no load read, no line
        assert len(caplog.messages) == 1
    finally:
        torch.set_num_threads(before)


def test_the_load_average_is_zero_where_the_platform_has_none(monkeypatch):
    from mnp.cli import resources

    monkeypatch.delattr(resources.os, "getloadavg")
    assert resources.load_average() == 0.0


# ---------------------------------------------------------------------------- run_job (in process)
def job_cfg(tmp_path, **extra):
    return OmegaConf.create({"paths": {"output_dir": str(tmp_path)}, "seed": 3, "experiment_name": "t", **extra})


def missing_data(tmp_path):
    CustomDataModule(path=str(tmp_path / "absent.npz")).setup()


def missing_builtin_data(tmp_path):
    FeatureDataModule(dataset="cub", data_dir=str(tmp_path / "empty"), download=False).setup()


def test_run_job_records_a_failure_and_raises_a_plain_exception(tmp_path):
    def boom(cfg):
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(JobFailed, match="RuntimeError: CUDA out of memory") as e:
        run_job(boom, job_cfg(tmp_path))
    assert not isinstance(e.value, SystemExit)  # SystemExit would abort the remaining jobs
    rec = json.loads((tmp_path / FAILED).read_text())
    assert rec["status"] == "failed" and rec["error"] == "RuntimeError" and rec["message"] == "CUDA out of memory"
    assert "boom" in rec["traceback"] and rec["seed"] == 3 and rec["experiment"] == "t"
    # the same job succeeding later (resume) clears the record
    assert run_job(lambda cfg: {"test/acc": 0.5}, job_cfg(tmp_path)) == {"test/acc": 0.5}
    assert not (tmp_path / FAILED).exists()


def test_run_job_skips_absent_data(tmp_path):
    out = run_job(lambda cfg: missing_builtin_data(tmp_path), job_cfg(tmp_path))
    rec = json.loads((tmp_path / SKIPPED).read_text())
    assert rec["status"] == "skipped" and "not found in" in rec["reason"] and "empty/cub" in rec["reason"]
    assert out == {"skipped": rec["reason"]} and not (tmp_path / FAILED).exists()


def test_run_job_fails_on_a_file_the_config_names(tmp_path):
    cfg = job_cfg(tmp_path, dataset={"path": str(tmp_path / "absent.npz")})  # a typo'd dataset.path
    with pytest.raises(JobFailed, match="absent.npz not found"):
        run_job(lambda c: missing_data(tmp_path), cfg)
    assert json.loads((tmp_path / FAILED).read_text())["status"] == "failed"
    assert not (tmp_path / SKIPPED).exists()


def test_only_absent_data_files_count_as_missing(tmp_path):
    def caught(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            return e

    assert is_missing_data(caught(lambda: missing_data(tmp_path)))
    bad = tmp_path / "bad.npz"
    np.savez(bad, x1=np.ones((4, 2)), y=np.array([0, 1, 0, 1.5]))
    damaged = caught(lambda: CustomDataModule(path=str(bad)).setup())
    assert isinstance(damaged, DataError) and not is_missing_data(damaged)  # bad data is a failure
    assert not is_missing_data(caught(lambda: open(tmp_path / "last.ckpt")))  # not raised by the data layer


def test_missing_data_is_told_by_its_type_not_its_text(tmp_path):
    """The data layer raises MissingData where a file is absent or cannot be fetched; the sweep reads the type."""
    from datamodules import sources
    from datamodules.cifar10c import CIFAR10C

    def caught(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            return e

    absent = [
        caught(lambda: missing_builtin_data(tmp_path)),
        caught(lambda: missing_data(tmp_path)),
        caught(lambda: sources.fetch("cub", sources.DataFile("cub.mat"), tmp_path)),
        caught(lambda: sources.download((tmp_path / "nowhere").as_uri(), tmp_path / "f.mat", None)),
        caught(lambda: CIFAR10C(feature_dir=str(tmp_path / "feats")).setup()),
    ]
    assert [type(e) for e in absent] == [MissingData] * 5, absent
    assert all(isinstance(e, FileNotFoundError) and is_missing_data(e) for e in absent)
    assert [str(e).split(";")[0] for e in absent[2:]] == [
        "cub.mat not found and it has no public source: put cub.mat in " + str(tmp_path / "cub") + "/",
        f"could not download f.mat from {(tmp_path / 'nowhere').as_uri()} ([Errno 2] No such file or directory: "
        f"'{tmp_path / 'nowhere'}')",
        f"cifar10c features not found: {tmp_path}/feats/train/feature/gaussian_noise_severity_1_inceptionv3_feat.npy",
    ]
    try:
        raise RuntimeError("instantiating the datamodule failed") from absent[0]
    except RuntimeError as e:
        assert is_missing_data(e)  # a cause counts
    assert not is_missing_data(DataError("cub.mat not found in data/cub/"))  # the words alone do not
    assert not is_missing_data(FileNotFoundError("last.ckpt"))


def test_run_job_returns_the_optimized_metric(tmp_path):
    cfg = job_cfg(tmp_path, optimized_metric="val/nll")
    assert run_job(lambda c: {"val/nll": 0.25, "test/acc": 0.9}, cfg) == 0.25
    with pytest.raises(JobFailed, match="optimized_metric 'val/nll' is not in the job's metrics"):
        run_job(lambda c: {"test/acc": 0.9}, cfg)
    assert np.isnan(run_job(lambda c: missing_data(tmp_path), cfg))  # Optuna marks the trial failed


# ---------------------------------------------------------------------------- real multiruns
TEST_OVERRIDES = ("trainer.max_epochs=1", "eval.noise=false")  # every test multirun's, hence in its job names
SUFFIX = "_eval.noise=False,trainer.max_epochs=1"  # Hydra writes a multirun job's booleans as False


def train_multirun(tmp_path, *args, timeout=600):
    env = dict(os.environ, WANDB_MODE="disabled", HYDRA_FULL_ERROR="0")
    cmd = [
        sys.executable,
        "train.py",
        "-m",
        f"paths.log_dir={tmp_path / 'logs'}",
        "logger=none",
        "trainer.enable_progress_bar=false",
        *TEST_OVERRIDES,
        *args,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_multirun_isolates_failures_skips_absent_data_and_resumes(tmp_path):
    conf = tmp_path / "conf"
    (conf / "dataset").mkdir(parents=True)
    (conf / "model").mkdir()
    (conf / "dataset" / "typo.yaml").write_text(  # dataset.path names a file that is not there: a failure
        f"_target_: datamodules.custom.CustomDataModule\nname: typo\npath: {tmp_path}/absent.npz\nseed: ${{seed}}\n"
    )
    (conf / "dataset" / "nodata.yaml").write_text(  # a built-in dataset whose files are not there: skipped
        f"_target_: datamodules.features.FeatureDataModule\nname: nodata\ndataset: cub\n"
        f"data_dir: {tmp_path}/empty\ndownload: false\nseed: ${{seed}}\n"
    )
    broken = "_target_: baselines.mlp.MLP\nname: broken\nhidden: [16]\ndropout: {}\n"
    (conf / "model" / "broken.yaml").write_text(broken.format(2.0))  # outside model.dropout's domain: the job fails
    sweep = [f"hydra.searchpath=[file://{conf}]", "model=broken,mlp"]
    jobs = tmp_path / "logs" / "default" / "multiruns"

    first = train_multirun(tmp_path, *sweep, "dataset=typo,nodata,synthetic")
    assert first.returncode != 0, first.stderr[-2000:]  # a failed job makes the sweep exit non-zero ...
    rec = json.loads((jobs / ("broken_synthetic_s0" + SUFFIX) / FAILED).read_text())
    assert rec["model"] == "broken" and "model.dropout must be" in rec["message"], rec
    assert "Traceback (most recent call last)" in (jobs / ("broken_synthetic_s0" + SUFFIX) / "train.log").read_text()
    assert (jobs / ("mlp_synthetic_s0" + SUFFIX) / "metrics.json").is_file()  # ... after the later jobs ran
    assert "absent.npz not found" in json.loads((jobs / f"mlp_typo_s0{SUFFIX}" / FAILED).read_text())["message"]
    assert not (jobs / f"mlp_typo_s0{SUFFIX}" / SKIPPED).exists()
    assert "not found in" in json.loads((jobs / f"mlp_nodata_s0{SUFFIX}" / SKIPPED).read_text())["reason"]
    assert not (jobs / f"mlp_nodata_s0{SUFFIX}" / FAILED).exists()
    for dataset in ("typo", "nodata"):  # the broken model's config fails before any data is read
        assert (
            "model.dropout must be"
            in json.loads((jobs / f"broken_{dataset}_s0{SUFFIX}" / FAILED).read_text())["message"]
        )
    assert [ln for ln in first.stdout.splitlines() if ln.startswith("  failed")] and [
        ln for ln in first.stdout.splitlines() if ln.startswith("  skipped")
    ], first.stdout[-2000:]

    # resume: the fixed model re-runs, the finished job is not retrained, absent data is still skipped, and a
    # sweep with a skipped job exits non-zero in one line that says so
    (conf / "model" / "broken.yaml").write_text(broken.format(0.0))
    done = (jobs / ("mlp_synthetic_s0" + SUFFIX) / "metrics.json").stat().st_mtime_ns
    second = train_multirun(tmp_path, *sweep, "dataset=nodata,synthetic")
    assert second.returncode == 1, second.stderr[-2000:]
    assert [ln for ln in second.stderr.splitlines() if "error" in ln.lower()] == [
        "error: 2 of 4 jobs of the sweep have no metrics (2 skipped); the lines above say why"
    ], second.stderr[-2000:]
    assert (jobs / ("mlp_synthetic_s0" + SUFFIX) / "metrics.json").stat().st_mtime_ns == done
    assert (jobs / ("broken_synthetic_s0" + SUFFIX) / "metrics.json").is_file()
    assert not (jobs / ("broken_synthetic_s0" + SUFFIX) / FAILED).exists()
    assert (jobs / ("mlp_nodata_s0" + SUFFIX) / SKIPPED).is_file()


@pytest.mark.slow
def test_submitit_local_sweep(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    res = train_multirun(tmp_path, "launcher=submitit_local", "model=mlp", "dataset=synthetic", "seed=0,1")
    assert res.returncode == 0, res.stderr[-2000:]
    jobs = tmp_path / "logs" / "default" / "multiruns"
    for seed in (0, 1):
        m = json.loads((jobs / f"mlp_synthetic_s{seed}{SUFFIX}" / "metrics.json").read_text())
        assert m["seed"] == seed and m["test/acc"] > 0.5
    assert (jobs / ".submitit").is_dir()  # the jobs really went through submitit


def test_conformal_preset_is_the_declared_study():
    cfg = compose_hydra(["experiment=conformal", "model=mlp", "dataset=synthetic"])
    params = cfg.hydra.sweeper.params
    assert set(options(params.model)) == {"mnp", "mcd", "de_ef", "de_lf", "sngp", "etp", "tmc", "mgp"}
    assert options(params.dataset) == ["handwritten", "cub", "pie", "scene15"]
    assert (cfg.eval.conformal, cfg.eval.conformal_alpha, cfg.eval.calibration) == ("aps", 0.1, "none")
    assert cfg.dataset.val_fraction == 0.2 and cfg.eval.split == "test"
