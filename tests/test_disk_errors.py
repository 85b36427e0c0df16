"""A run directory that cannot be created, and a disk that fills during a run: one error line each, as
``train.py`` prints it, with the earlier good checkpoint kept and no temp file left."""

import os
import resource
import signal
import subprocess
import sys

import pytest
from cfg_utils import ROOT
from cli_utils import run_cli

MLP = ["train.py", "model=mlp", "trainer.max_epochs=3", "eval.noise=false", "logger=none"]


@pytest.mark.slow
def test_a_run_directory_below_a_regular_file_is_one_line(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    res = run_cli([*MLP, f"hydra.run.dir={blocker / 'run'}"])
    err = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(err) == 1, res.stderr[-1500:]
    assert err[0].startswith(f"error: cannot create the run directory {blocker}") and "paths.log_dir" in err[0]


@pytest.mark.slow
def test_a_disk_that_fills_during_training_is_one_line_and_keeps_the_good_checkpoint(tmp_path):
    run = tmp_path / "run"
    first = run_cli([*MLP, "trainer.max_epochs=1", f"hydra.run.dir={run}", "test=false"])
    assert first.returncode == 0, first.stderr[-1500:]
    last = run / "checkpoints" / "last.ckpt"
    good = last.read_bytes()

    def small_disk():  # every file this process writes is capped: the next checkpoint cannot be written
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(good) // 2, resource.RLIM_INFINITY))

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # inherited: a write past the cap fails with EFBIG
    try:
        res = subprocess.run(
            [sys.executable, *MLP, f"hydra.run.dir={run}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            preexec_fn=small_disk,
            timeout=300,
            env={**os.environ, "MNP_TORCH_THREADS": "1", "WANDB_MODE": "disabled"},
        )
    finally:
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    err = [x for x in res.stderr.strip().splitlines() if x.strip()]
    assert res.returncode == 1 and len(err) == 1, res.stderr[-2000:]
    assert err[0].startswith(f"error: could not write the checkpoint {last}") and "is the disk full?" in err[0]
    assert last.read_bytes() == good  # the last good checkpoint is kept
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]  # no temp file left
