"""Crash recovery with a real kill -9, non-finite losses, determinism."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import pytorch_lightning as pl
import torch
from cfg_utils import ROOT, compose_train

from baselines.mlp import MLP
from datamodules.synthetic import TwoMoons
from mnp.cli.pipeline import train
from mnp.runs.checkpointing import AtomicCheckpointIO, checkpoint_callbacks

THROTTLE = "+callbacks.extra.throttle={_target_:mnp.cli.callbacks.Throttle,seconds:0.4}"


def _cmd(out, epochs=8):
    return [
        sys.executable,
        "train.py",
        "model=mlp",
        f"trainer.max_epochs={epochs}",
        "seed=5",
        f"hydra.run.dir={out}",
        "logger=none",
        "trainer.enable_progress_bar=false",
    ]


@pytest.mark.slow
def test_kill9_then_resume_matches_uninterrupted(tmp_path):
    env = {**os.environ, "WANDB_MODE": "disabled"}
    ref = subprocess.run(_cmd(tmp_path / "ref"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-2000:]
    crashed = tmp_path / "crashed"
    proc = subprocess.Popen(
        [*_cmd(crashed), THROTTLE], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    ckpt = crashed / "checkpoints" / "last.ckpt"
    deadline = time.time() + 240
    while time.time() < deadline:  # wait until at least 2 epochs are checkpointed
        if ckpt.exists():
            try:
                if torch.load(ckpt, weights_only=False)["epoch"] >= 1:
                    break
            except Exception:  # being replaced right now
                pass
        time.sleep(0.1)
    assert proc.poll() is None, "the job finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (crashed / "metrics.json").exists()
    resumed = subprocess.run(
        [*_cmd(crashed), "ckpt_path=last"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a = json.loads((tmp_path / "ref" / "metrics.json").read_text())
    b = json.loads((crashed / "metrics.json").read_text())
    for key in ("test/acc", "test/ece", "test/nll", "test/brier", "epochs"):
        assert a[key] == b[key], key


class NaNAfterTwoEpochs(MLP):
    def training_loss(self, views, y):
        loss, logs = super().training_loss(views, y)
        return (loss * float("nan") if self.current_epoch >= 2 else loss), logs


def test_nonfinite_loss_stops_with_step_and_keeps_checkpoint(tmp_path):
    dm = TwoMoons(n_train=200, n_test=50, batch_size=50)
    dm.setup()
    model = NaNAfterTwoEpochs(num_classes=2, view_dims=[2])
    trainer = pl.Trainer(
        max_epochs=5,
        logger=False,
        enable_progress_bar=False,
        plugins=[AtomicCheckpointIO()],
        callbacks=checkpoint_callbacks(tmp_path),
        enable_model_summary=False,
    )
    with pytest.raises(FloatingPointError, match=r"non-finite training loss \(nan\) at epoch 2, global step 8"):
        trainer.fit(model, dm)
    kept = torch.load(tmp_path / "last.ckpt", weights_only=False)
    assert kept["epoch"] == 1  # the last good epoch
    assert all(torch.isfinite(v).all() for v in kept["state_dict"].values())


def test_same_seed_same_metrics_different_seed_differs(tmp_path):
    def run(seed, sub):
        return train(compose_train(tmp_path / sub, ["model=mlp", "trainer.max_epochs=2", f"seed={seed}"]))

    a, b, c = run(1, "a"), run(1, "b"), run(2, "c")
    keys = [k for k in a if not k.startswith("time/")]
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    assert a["test/nll"] != c["test/nll"]
