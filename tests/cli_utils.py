"""Helpers of the bad-input tests: run ``train.py`` (in-process under the CLI's guard, or as a real
subprocess) and check the one-line error contract: ``error: ...`` on stderr, exit 1, no outputs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cfg_utils import ROOT

from mnp.cli.cli import run_guarded


def guarded_error(fn, cfg, capsys) -> str:
    """Run ``fn(cfg)`` under the CLI guard; assert exit 1 and exactly one stderr line; return it."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        run_guarded(fn, cfg)
    assert e.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def assert_no_outputs(out_dir):
    left = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*")) if out_dir.exists() else []
    assert left == [], left


def run_cli(args, cwd=ROOT, timeout=240):
    """``python <args>`` with one CPU thread, W&B off and no HYDRA_FULL_ERROR."""
    env = {**os.environ, "WANDB_MODE": "disabled", "MNP_TORCH_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def hydra_only(run_dir):
    """Only Hydra's own files (its .hydra/ config record and the job log) are in the run directory."""
    return {p.name for p in run_dir.iterdir()} <= {".hydra", "train.log"} if run_dir.exists() else True
