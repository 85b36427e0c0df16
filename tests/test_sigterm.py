"""SIGTERM (kill, a scheduler, a container stop) ends a run or a sweep with exit status 143 and one
``error:`` line, keeps a resumable last.ckpt, and the same command resumes (mnp.runs.signals); Ctrl-C (SIGINT)
ends the same way with status 130."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mnp.runs.checkpointing import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
# MNP on 10,000 two-moons rows: about a second per epoch here, so a SIGTERM lands inside an epoch
SLOW = [
    "model=mnp",
    "dataset=synthetic",
    "dataset.n_train=10000",
    "model.warmup.epochs=2",
    "trainer.max_epochs=4",
    "trainer.enable_progress_bar=false",
    "eval.noise=false",
]


def start(tmp_path, *args) -> subprocess.Popen:
    env = {**os.environ, "WANDB_MODE": "disabled", "MNP_TORCH_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.Popen(
        [sys.executable, "train.py", *args, f"paths.log_dir={tmp_path / 'logs'}", *SLOW],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # as in a terminal


def wait_for(pattern: str, root: Path, proc: subprocess.Popen, timeout: float = 120) -> Path:
    """The first file matching ``pattern`` under ``root`` once it exists (the process must still run)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = sorted(root.glob(pattern))
        if found:
            return found[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError(f"no {pattern} under {root} after {timeout} s")


def error_lines(stderr: str) -> list[str]:
    """The lines that report an error; loky's resource tracker may warn at shutdown that a semaphore of a killed
    worker is already gone (`resource_tracker: ... FileNotFoundError`), joblib's own cleanup race, not ours."""
    return [
        ln
        for ln in stderr.splitlines()
        if ("error" in ln.lower() or "Traceback" in ln or "SIGTERM" in ln) and "resource_tracker" not in ln
    ]


@pytest.mark.slow
def test_sigterm_in_the_warmup_exits_143_in_one_line_and_the_same_command_resumes(tmp_path):
    proc = start(tmp_path)
    last = wait_for("logs/default/runs/*/checkpoints/last.ckpt", tmp_path, proc)  # epoch 1 (warm-up) is done
    proc.send_signal(signal.SIGTERM)  # during epoch 2, still the warm-up
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    done = int(load_checkpoint(last)["epoch"]) + 1  # a readable, resumable checkpoint
    assert 1 <= done < 4
    lines = error_lines(err)
    assert len(lines) == 1 and re.fullmatch(
        rf"error: terminated by SIGTERM during training; re-run the same command to resume from epoch {done + 1} of 4 "
        rf"\({re.escape(str(last))} holds epochs? 1(-{done})?\)",
        lines[0],
    ), err[-2000:]
    run_dir = last.parent.parent
    assert not (run_dir / "metrics.json").exists()  # no metrics of a half-trained model

    again = start(tmp_path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-2000:]
    assert f"resuming from {last}" in out
    assert "Finished: mnp on synthetic, seed 0, 4 epochs" in out
    assert int(load_checkpoint(last)["epoch"]) == 3


@pytest.mark.slow
def test_ctrl_c_in_training_exits_130_in_one_line_saying_how_to_resume(tmp_path):
    proc = start(tmp_path)
    last = wait_for("logs/default/runs/*/checkpoints/last.ckpt", tmp_path, proc)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    done = int(load_checkpoint(last)["epoch"]) + 1  # a readable, resumable checkpoint
    assert 1 <= done < 4
    lines = [
        ln
        for ln in (out + err).splitlines()
        if "error" in ln.lower() or "Traceback" in ln or "Interrupt" in ln or "Ctrl-C" in ln
    ]
    assert len(lines) == 1 and re.fullmatch(
        rf"error: interrupted by Ctrl-C during training; re-run the same command to resume from epoch {done + 1} of 4 "
        rf"\({re.escape(str(last))} holds epochs? 1(-{done})?\)",
        lines[0],
    ), (out + err)[-2000:]
    assert lines[0] in err and not (last.parent.parent / "metrics.json").exists()
    assert lines[0][len("error: ") :] in (last.parent.parent / "train.log").read_text()  # the log says why it ended


@pytest.mark.slow
def test_sigterm_stops_a_sweep_whose_summary_names_the_interrupted_job(tmp_path):
    proc = start(tmp_path, "-m", "seed=0,1")
    last = wait_for("logs/default/multiruns/*/checkpoints/last.ckpt", tmp_path, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith(
        "error: terminated by SIGTERM during training; re-run the same command to resume from epoch"
    ), err[-2000:]
    job = last.parent.parent.name
    assert job.startswith("mnp_synthetic_s0")
    assert "Sweep stopped: 1 interrupted" in out and f"  interrupted {job}: terminated by SIGTERM" in out, out[-2000:]
    assert [p.name for p in (tmp_path / "logs" / "default" / "multiruns").glob("mnp_*")] == [job]  # seed 1 never ran


def live_processes() -> dict[int, int]:
    """pid -> parent pid of every live process (from /proc), zombies not counted."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, IndexError, ValueError):
            continue
        if state not in "ZX":
            parent[int(stat.parent.name)] = int(ppid)
    return parent


def descendants(pid: int) -> set[int]:
    parent, found, todo = live_processes(), set(), [pid]
    while todo:
        below = todo.pop()
        kids = [p for p, pp in parent.items() if pp == below]
        found.update(kids)
        todo += kids
    return found


@pytest.mark.slow
def test_sigterm_to_a_joblib_sweep_ends_its_workers_and_names_their_jobs(tmp_path):
    proc = start(tmp_path, "-m", "launcher=joblib", "seed=0,1")
    end = time.monotonic() + 120
    while len(list(tmp_path.glob("logs/default/multiruns/*/checkpoints/last.ckpt"))) < 2:  # both workers train
        assert proc.poll() is None and time.monotonic() < end, proc.communicate() if proc.poll() is not None else ""
        time.sleep(0.1)
    workers = descendants(proc.pid)
    assert len(workers) >= 2, workers
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    time.sleep(3)
    assert not workers & set(live_processes()), "workers left running"  # none outlives its parent
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("error: terminated by SIGTERM"), err[-2000:]
    assert "Sweep stopped: 2 interrupted" in out, out[-2000:]
    for seed in (0, 1):
        assert re.search(rf"  interrupted mnp_synthetic_s{seed}\S*: terminated by SIGTERM", out), out[-2000:]
