"""train(cfg) / evaluate(cfg) end to end, the CLIs, outputs and resume."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from cfg_utils import CONF, ROOT, compose_train
from omegaconf import OmegaConf

from mnp.cli.pipeline import evaluate, train

CONTRACT = {
    "model",
    "dataset",
    "seed",
    "epochs",
    "test/acc",
    "test/ece",
    "test/nll",
    "test/brier",
    "time/train_epoch_s",
    "time/test_s",
    "time/total_s",
}


def test_train_writes_contract_and_evaluate_reproduces(tmp_path):
    cfg = compose_train(tmp_path, ["model=mlp", "trainer.max_epochs=2", "seed=3"])
    res = train(cfg)
    assert CONTRACT <= set(res)
    assert res["model"] == "mlp" and res["dataset"] == "synthetic" and res["seed"] == 3 and res["epochs"] == 2
    assert res["test/acc"] > 0.8  # two moons are nearly separable
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk["test/acc"] == res["test/acc"]
    preds = np.load(tmp_path / "predictions.npz")
    assert preds["test/probs"].shape == (500, 2) and preds["test/labels"].shape == (500,)
    assert np.allclose(preds["test/probs"].sum(1), 1, atol=1e-5)
    assert (tmp_path / "checkpoints" / "last.ckpt").exists()
    assert OmegaConf.load(tmp_path / "config.yaml").model.name == "mlp"
    assert not list(tmp_path.glob("**/*.tmp"))

    ev_dir = tmp_path / "eval"
    ev = evaluate(
        OmegaConf.create(
            {
                "ckpt_path": str(tmp_path / "checkpoints" / "last.ckpt"),
                "output_dir": str(ev_dir),
                "data_dir": None,
                "eval": None,
                "trainer": {"accelerator": "cpu", "devices": 1},
            }
        )
    )
    for key in ("test/acc", "test/ece", "test/nll", "test/brier"):
        assert ev[key] == pytest.approx(res[key], abs=1e-6)
    assert (ev_dir / "metrics.json").exists() and (ev_dir / "predictions.npz").exists()


def test_skip_if_done_and_resume_from_last(tmp_path):
    cfg = compose_train(tmp_path, ["model=mlp", "trainer.max_epochs=1"])
    first = train(cfg)
    again = train(cfg)  # metrics.json exists -> skipped, same numbers
    assert again == first
    (tmp_path / "metrics.json").unlink()
    first_epoch_time = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)["epoch_times"][0]
    cfg2 = compose_train(tmp_path, ["model=mlp", "trainer.max_epochs=3"])
    res = train(cfg2)  # resumes from last.ckpt (epoch 1) and trains two more epochs
    assert res["epochs"] == 3
    times = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)["epoch_times"]
    assert len(times) == 3 and times[0] == first_epoch_time  # the first epoch came from the checkpoint


def test_a_resumed_runs_total_time_counts_every_session(tmp_path):
    """Each checkpoint stores the run's time so far; the resumed session adds its own to it."""
    train(compose_train(tmp_path, ["model=mlp", "trainer.max_epochs=1", "test=false"]))
    last = tmp_path / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=False)
    assert 0 < ckpt["elapsed_s"] < 600
    ckpt["elapsed_s"] = 1000.0  # as if the first session had taken 1000 s
    torch.save(ckpt, last)
    res = train(compose_train(tmp_path, ["model=mlp", "trainer.max_epochs=2"]))
    assert 1000 < res["time/total_s"] < 1600
    assert torch.load(last, weights_only=False)["elapsed_s"] > 1000


def test_the_summary_says_what_it_times_and_lists_the_files_there(tmp_path, monkeypatch, caplog):
    """The files saved after the test (logger=wandb's figures) are listed, an empty log is not, and the epoch time
    says it is a median of the timed epochs."""
    import logging

    import mnp.cli.pipeline as pipeline
    from mnp.runs.summary import run_summary

    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setattr(pipeline, "log_summary", lambda lg, results, out, *a: (out / "noise.png").write_bytes(b"png"))
    (tmp_path / "evaluate.log").touch()
    with caplog.at_level(logging.INFO, logger="mnp"):
        res = train(
            compose_train(
                tmp_path,
                [
                    "model=mlp",
                    "trainer.max_epochs=2",
                    "logger=wandb",
                    "logger.wandb.job_type=mlp",
                    "logger.wandb.tags=[t]",
                ],
            )
        )
    assert res["time/train_epochs"] == 2
    text = run_summary(res, tmp_path)
    assert caplog.text.count("Run directory:") == 1 and "  noise.png  (3 B)" in caplog.text
    assert "  noise.png  (3 B)" in text and "evaluate.log" not in text
    assert f"train time / epoch  {res['time/train_epoch_s']:.2f} s (median of 2 epochs)" in text
    assert "(median of 3 main epochs)" in run_summary({**res, "epochs": 5, "time/train_epochs": 3}, tmp_path)


def test_unwritable_output_dir(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if os.access(ro, os.W_OK):  # root ignores permission bits: use a path below a file instead
        blocker = tmp_path / "file"
        blocker.write_text("x")
        ro = blocker / "sub"
    cfg = compose_train(ro, ["model=mlp", "trainer.max_epochs=1"])
    with pytest.raises(PermissionError, match="not writable"):
        train(cfg)


def _run(args, cwd, env_extra=None, timeout=240):
    env = {**os.environ, "WANDB_MODE": "disabled", **(env_extra or {})}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_cli_train_then_evaluate(tmp_path):
    out = tmp_path / "run"
    r = _run(["train.py", "model=mlp", "trainer.max_epochs=1", f"hydra.run.dir={out}", "logger=csv"], ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "metrics.json").read_text())["epochs"] == 1
    # the README's command as it is (no hydra.run.dir): Hydra's record goes beside the metrics, in <run>/eval
    r = _run(["evaluate.py", f"ckpt_path={out}/checkpoints/last.ckpt"], ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "eval" / "metrics.json").exists() and (out / "eval" / ".hydra" / "config.yaml").exists()
    assert (
        json.loads((out / "eval" / "metrics.json").read_text())["test/acc"]
        == json.loads((out / "metrics.json").read_text())["test/acc"]
    )


@pytest.mark.slow
def test_cli_missing_checkpoint_one_line(tmp_path):
    r = _run(["evaluate.py", f"ckpt_path={tmp_path}/none.ckpt", f"hydra.run.dir={tmp_path}"], ROOT)
    assert r.returncode == 1
    assert (
        r.stderr.strip().splitlines()[-1]
        == f"error: checkpoint {tmp_path}/none.ckpt does not exist (traceback in {tmp_path}/evaluate.log)"
    )
    assert "Traceback" not in r.stderr


def _names(group):
    return sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml"))


@pytest.mark.slow
def test_every_model_dataset_config_composes(tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import get_class

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        for model in _names("model"):
            for dataset in _names("dataset"):
                cfg = compose(
                    "train", overrides=[f"model={model}", f"dataset={dataset}", f"paths.output_dir={tmp_path}"]
                )
                assert cfg.model.name == model and cfg.dataset.name == dataset
                assert get_class(cfg.model._target_) and get_class(cfg.dataset._target_)
                # dataset=custom: null, sized by about train_steps optimiser steps once the data is loaded
                assert cfg.trainer.max_epochs > 0 if dataset != "custom" else cfg.train_steps > 0


def test_fast_dev_run_and_best_checkpoint(tmp_path):
    res = train(compose_train(tmp_path / "fdr", ["model=mlp", "+trainer.fast_dev_run=true"]))
    assert 0 <= res["test/acc"] <= 1
    train(compose_train(tmp_path / "val", ["model=mlp", "trainer.max_epochs=2", "dataset.val_fraction=0.2"]))
    assert (tmp_path / "val" / "checkpoints" / "best.ckpt").exists()
    assert (tmp_path / "val" / "checkpoints" / "last.ckpt").exists()
