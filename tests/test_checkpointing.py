"""Checkpoints, resumes and evaluation under crashes, damaged or planted files and concurrent runs (that the test
numbers do not depend on what the process did before: tests/test_checkpointing_evaluation.py)."""

import csv
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from cfg_utils import ROOT, compose_train
from omegaconf import OmegaConf

from baselines.mlp import MLP
from mnp.cli.cli import run_guarded
from mnp.cli.pipeline import evaluate, train
from mnp.runs.checkpointing import AtomicCheckpointIO

pytestmark = pytest.mark.usefixtures("one_thread")

MLP_RUN = ["model=mlp", "eval.noise=false", "skip_if_done=false", "seed=2"]
THROTTLE = "+callbacks.extra.throttle={_target_:mnp.cli.callbacks.Throttle,seconds:0.5}"


def cli(*args, wait=True):
    env = {**os.environ, "WANDB_MODE": "disabled", "MNP_TORCH_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    quiet = ["logger=none", "trainer.enable_progress_bar=false"] if args[0] == "train.py" else []
    cmd = [sys.executable, *args, *quiet]
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def one_line(returncode, stderr):
    """The CLI's failure: exit status 1 and one ``error: ...`` line on stderr, no traceback; returned without the
    ``(traceback in <run log>)`` it ends with when the run has a log file, which must hold the traceback."""
    assert returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    line, found, log = lines[0].partition(" (traceback in ")
    assert not found or "Traceback (most recent call last)" in Path(log[:-1]).read_text()
    return line


def guarded(fn, cfg, capsys):
    """``fn(cfg)`` through the CLI's guard: the one line it prints (exit status 1)."""
    with pytest.raises(SystemExit) as e:
        run_guarded(fn, cfg)
    return one_line(e.value.code, capsys.readouterr().err)


def eval_cfg(ckpt, out):
    return OmegaConf.create(
        {
            "ckpt_path": str(ckpt),
            "output_dir": str(out),
            "data_dir": None,
            "eval": None,
            "trainer": {"accelerator": "cpu", "devices": 1},
        }
    )


def results(res):
    return {k: v for k, v in res.items() if not k.startswith("time/")}


# ---------------------------------------------------------------------------- 1, 2: atomic writes, prev.ckpt
def test_failed_write_keeps_the_good_checkpoint_and_leaves_no_temp_file(tmp_path):
    """A real write failure (the file size limit, as a full disk would fail it) in Lightning's save."""
    model = MLP(num_classes=2, view_dims=[2], hidden=[512, 512])
    trainer = pl.Trainer(logger=False, plugins=[AtomicCheckpointIO()], enable_progress_bar=False)
    trainer.strategy.connect(model)
    last = tmp_path / "last.ckpt"
    trainer.save_checkpoint(last)
    good = last.read_bytes()
    with torch.no_grad():
        model.net[0].weight.add_(1.0)
    old_limit, old_handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(good) // 2, old_limit[1]))
    try:
        with pytest.raises(OSError, match=r"could not write the checkpoint .*is the disk full\?"):
            trainer.save_checkpoint(last)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert last.read_bytes() == good and sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_a_checkpoint_folder_that_became_a_file_is_named_not_blamed_on_the_disk(tmp_path):
    model = MLP(num_classes=2, view_dims=[2], hidden=[8])
    trainer = pl.Trainer(logger=False, plugins=[AtomicCheckpointIO()], enable_progress_bar=False)
    trainer.strategy.connect(model)
    (tmp_path / "checkpoints").write_text("my notes")
    with pytest.raises(NotADirectoryError, match=r"checkpoints is a file, not a directory, so no checkpoint can be"):
        trainer.save_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert (tmp_path / "checkpoints").read_text() == "my notes"


def test_a_run_keeps_one_checkpoint_and_a_crash_while_writing_it_resumes_from_the_previous_one(tmp_path, caplog):
    """prev.ckpt lives only while last.ckpt is replaced: a finished write leaves last.ckpt alone. A crash in that
    window that left last.ckpt damaged (power loss on a disk that does not honour fsync): the re-run resumes from
    prev.ckpt with a warning naming the damaged file and ends where an uninterrupted run ends; prev.ckpt is never
    given up for the damaged file, and goes once a good last.ckpt is in place. A temp file the crash left behind
    is removed."""
    straight = train(compose_train(tmp_path / "straight", [*MLP_RUN, "trainer.max_epochs=4"]))
    run = tmp_path / "run"
    last, prev = run / "checkpoints" / "last.ckpt", run / "checkpoints" / "prev.ckpt"
    train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=2", "test=false"]))
    epoch_1 = last.read_bytes()
    train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=3", "test=false"]))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.ckpt"]  # no second copy on disk
    assert torch.load(last, weights_only=True)["epoch"] == 2
    prev.write_bytes(epoch_1)  # the window: the old last.ckpt kept as prev.ckpt, the new one damaged
    last.write_bytes(last.read_bytes()[:5000])
    stale = run / "checkpoints" / ".last.ckpt.4242.0123abcd.tmp"
    stale.write_bytes(b"half a checkpoint")
    resumed = train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=4"]))
    assert f"{last} cannot be read: it is a truncated or damaged zip archive" in caplog.text
    assert f"resuming from {prev} (epoch 1) instead" in caplog.text
    assert results(resumed) == results(straight)
    assert torch.load(last, weights_only=True)["epoch"] == 3
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.ckpt"]


def test_past_the_warmup_a_checkpoint_leaves_out_the_warmup_optimiser(tmp_path):
    """MNP's warm-up Adam never steps after the warm-up: its moments are in the warm-up's checkpoints only (the
    resumed run still equals the uninterrupted one: tests/test_determinism.py)."""
    from mnp_utils import flat_mnp

    from datamodules import TensorDataModule
    from mnp.runs.checkpointing import checkpoint_callbacks

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(2), 20)
    dm = TensorDataModule([rng.normal(size=(40, 4)) + y[:, None]], y, np.arange(40), np.arange(0), batch_size=20)
    model = flat_mnp(num_classes=2, view_dims=[4], d_e=8, memory_size=4, projection="linear", warmup_epochs=2)
    last = tmp_path / "last.ckpt"
    for epochs in (1, 4):  # stop in the warm-up, then resume past it
        pl.Trainer(
            max_epochs=epochs,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=checkpoint_callbacks(tmp_path),
            plugins=[AtomicCheckpointIO(last if last.exists() else None)],
        ).fit(model, dm, ckpt_path=last if last.exists() else None)
        main, warm = torch.load(last, weights_only=True)["optimizer_states"]
        if epochs == 1:  # in the warm-up only the warm-up Adam has stepped
            assert warm["state"] and not main["state"]
    assert main["state"] and warm["state"] == {} and warm["param_groups"]


def test_unreadable_last_checkpoint_without_a_previous_one_stops_and_keeps_it(tmp_path, capsys):
    run = tmp_path / "run"
    train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=1", "test=false"]))
    last = run / "checkpoints" / "last.ckpt"
    assert not (run / "checkpoints" / "prev.ckpt").exists()
    last.write_bytes(last.read_bytes()[:5000])
    line = guarded(train, compose_train(run, [*MLP_RUN, "trainer.max_epochs=2"]), capsys)
    assert line.startswith(f"error: checkpoint {last} cannot be read") and "ckpt_path=null" in line
    assert last.stat().st_size == 5000


# ---------------------------------------------------------------------------- 3: a checkpoint that runs code
class Plant:
    marker = ""

    def __reduce__(self):
        return open, (self.marker, "w")


class SystemPlant(Plant):
    def __reduce__(self):  # a blocked module, which torch 2.14 words differently from a blocked global
        return os.system, (f"touch {self.marker}",)


@pytest.mark.slow
@pytest.mark.parametrize(
    "where,plant,created",
    [
        ("evaluate", Plant, "io.open"),
        ("resume", Plant, "io.open"),
        ("evaluate", SystemPlant, f"{os.system.__module__}.system"),
    ],
)
def test_planted_checkpoint_never_runs_code(tmp_path, where, plant, created):
    run = tmp_path / "run"
    assert cli("train.py", *MLP_RUN, "trainer.max_epochs=1", "test=false", f"hydra.run.dir={run}").returncode == 0
    last = run / "checkpoints" / "last.ckpt"
    marker, plant = tmp_path / "marker", plant()
    plant.marker = str(marker)
    torch.save({**torch.load(last, weights_only=True), "extra": plant}, last)  # looks like the real one
    if where == "evaluate":
        r = cli("evaluate.py", f"ckpt_path={last}", f"output_dir={tmp_path / 'eval'}", f"hydra.run.dir={tmp_path}")
    else:
        r = cli("train.py", *MLP_RUN, "trainer.max_epochs=2", f"hydra.run.dir={run}")
    line = one_line(r.returncode, r.stderr)
    assert not marker.exists()
    assert line == (
        f"error: checkpoint {last} refused: loading it would create {created}, so it could run code; "
        "only load checkpoints written by train.py"
    )
    assert not (tmp_path / "eval").exists() and not (run / "metrics.json").exists()


# ---------------------------------------------------------------------------- 4: csv/metrics.csv
def test_csv_log_keeps_every_epoch_across_resumes(tmp_path):
    run = tmp_path / "run"
    train(compose_train(run, [*MLP_RUN, "logger=csv", "trainer.max_epochs=2", "test=false"]))
    train(compose_train(run, [*MLP_RUN, "logger=csv", "trainer.max_epochs=4"]))
    with open(run / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows if r["train/loss"]] == [0, 1, 2, 3]
    assert [int(r["epoch"]) for r in rows if r["test/acc"]] == [4]


def test_a_rerun_after_a_failed_output_write_leaves_one_test_row(tmp_path, monkeypatch):
    """The disk filled up as the outputs were written, after the test pass had logged its row; the re-run
    tests again and must replace that row, not add a second one."""
    run = tmp_path / "run"

    def full(path, *args):
        raise OSError(28, "No space left on device", str(path))

    with monkeypatch.context() as m:
        m.setattr("mnp.cli.pipeline.write_npz", full)
        with pytest.raises(OSError, match="No space left"):
            train(compose_train(run, [*MLP_RUN, "logger=csv", "trainer.max_epochs=2"]))
    with open(run / "csv" / "metrics.csv", newline="") as f:
        assert [r["epoch"] for r in csv.DictReader(f) if r["test/acc"]] == ["2"]  # the failed pass had logged
    res = train(compose_train(run, [*MLP_RUN, "logger=csv", "trainer.max_epochs=2"]))
    with open(run / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows if r["train/loss"]] == [0, 1]
    assert [float(r["test/acc"]) for r in rows if r["test/acc"]] == [pytest.approx(res["test/acc"])]


# ---------------------------------------------------------------------------- 5: two processes, one run dir
@pytest.mark.slow
def test_second_process_on_a_run_dir_stops_naming_the_first(tmp_path):
    run = tmp_path / "run"
    cmd = ("train.py", *MLP_RUN, "trainer.max_epochs=20", f"hydra.run.dir={run}", THROTTLE)
    first = cli(*cmd, wait=False)
    time.sleep(3)
    second = cli(*cmd, wait=False)
    outs = [p.communicate(timeout=300) for p in (first, second)]
    codes = [p.returncode for p in (first, second)]
    assert sorted(codes) == [0, 1], [o[1][-2000:] for o in outs]
    loser, winner = (1, 0) if codes[1] == 1 else (0, 1)
    line = one_line(codes[loser], outs[loser][1])
    assert line == (
        f"error: {run} is in use by process {(first, second)[winner].pid} (another run of this job); "
        "wait for it to finish or stop it, then run again"
    )
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 20
    assert not (run / ".lock").exists() and not list(run.rglob("*.tmp"))


# ---------------------------------------------------------------------------- 6: the wrong file as a checkpoint
@pytest.mark.parametrize("other", [["model=mnp"], ["dataset.num_views=2"]])
def test_resuming_from_another_models_checkpoint_is_one_line(tmp_path, capsys, other):
    train(compose_train(tmp_path / "a", [*MLP_RUN, "trainer.max_epochs=1", "test=false"]))
    ckpt = tmp_path / "a" / "checkpoints" / "last.ckpt"
    overrides = [*MLP_RUN, *other, "trainer.max_epochs=2", f"ckpt_path={ckpt}"]
    line = guarded(train, compose_train(tmp_path / "b", overrides), capsys)
    assert line.startswith(f"error: checkpoint {ckpt} (model mlp on dataset synthetic) does not fit this run's model: ")
    assert line.endswith("resume from a checkpoint of the same model and dataset, or set ckpt_path=null")
    assert not (tmp_path / "b" / "config.yaml").exists()


BAD_FILES = {
    "truncated": (lambda good: good[: len(good) // 2], "a truncated or damaged zip archive"),
    "json": (lambda good: b'{"epoch": 3}', "a JSON file, not a checkpoint"),
    "npz": (None, "a NumPy .npz archive, not a checkpoint"),
    "random": (lambda good: np.random.default_rng(0).bytes(4096), "not a PyTorch checkpoint (4096 bytes"),
}


@pytest.mark.parametrize("kind", BAD_FILES)
def test_evaluate_with_a_file_that_is_not_a_checkpoint_is_one_line(tmp_path, capsys, kind):
    train(compose_train(tmp_path / "a", [*MLP_RUN, "trainer.max_epochs=1", "test=false"]))
    make, says = BAD_FILES[kind]
    bad = tmp_path / f"bad.{kind}"
    if make is None:
        np.savez(bad, x=np.ones(3))
    else:
        bad.write_bytes(make((tmp_path / "a" / "checkpoints" / "last.ckpt").read_bytes()))
    line = guarded(evaluate, eval_cfg(bad, tmp_path / "eval"), capsys)
    assert line.startswith(f"error: checkpoint {bad} cannot be read: it is {says}")
    assert not (tmp_path / "eval").exists()


# ---------------------------------------------------------------------------- 8: file modes
def test_outputs_respect_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        train(compose_train(tmp_path, [*MLP_RUN, "trainer.max_epochs=1"]))
    finally:
        os.umask(old)
    for f in ("metrics.json", "predictions.npz", "config.yaml", "checkpoints/last.ckpt"):
        assert stat.S_IMODE((tmp_path / f).stat().st_mode) == 0o644, f


# ---------------------------------------------------------------------------- callbacks.checkpoint.every_n_epochs
@pytest.mark.parametrize("every,saved_epoch", [(0, None), (2, 1), (1, 2)])
def test_checkpoint_every_n_epochs(tmp_path, every, saved_epoch):
    """A checkpoint after every n-th epoch (the last one written after epoch 2 of 3 for n = 2), none at
    all for n = 0 (not even Lightning's own default checkpoint), and the run's results either way."""
    run = tmp_path / "run"
    res = train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=3", f"callbacks.checkpoint.every_n_epochs={every}"]))
    assert 0 <= res["test/acc"] <= 1
    files = sorted(p.relative_to(run).as_posix() for p in run.rglob("*.ckpt"))
    if saved_epoch is None:
        assert files == []
    else:
        assert "checkpoints/last.ckpt" in files
        assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == saved_epoch


@pytest.mark.slow
def test_negative_checkpoint_period_is_one_line(tmp_path):
    r = cli("train.py", "model=mlp", "callbacks.checkpoint.every_n_epochs=-1", f"paths.output_dir={tmp_path / 'run'}")
    assert "callbacks.checkpoint.every_n_epochs must be an integer >= 0, got -1" in one_line(r.returncode, r.stderr)
