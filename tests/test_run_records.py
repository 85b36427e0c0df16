"""A run's records against later jobs, run as a user runs them (train.py and evaluate.py as subprocesses):
a data file changed since the run, a refused re-run that must leave every byte of the finished run as it
was, and a resume that raises ``trainer.max_epochs`` of a run with a derived warm-up."""

import json
import re

import numpy as np
import pytest
from cli_utils import run_cli
from omegaconf import OmegaConf

from mnp.runs.rundir import rename_key


def write_data(path, seed=0, noise=False):
    """A small 3-class, 2-view ``.npz``; ``noise``: the same shapes and labels, the views pure noise."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), 40)
    shift = 0.0 if noise else 1.0
    np.savez(
        path,
        x1=rng.normal(size=(120, 6)) + 2.0 * shift * y[:, None],
        x2=rng.normal(size=(120, 4)) + shift * y[:, None],
        y=y,
    )
    return path


def g(data, run_dir, *extra, model="mlp", epochs=2):
    """``python train.py model=mlp trainer.max_epochs=2 dataset=custom dataset.path=<data>`` into ``run_dir``."""
    return run_cli(
        [
            "train.py",
            f"model={model}",
            f"trainer.max_epochs={epochs}",
            "dataset=custom",
            f"dataset.path={data}",
            f"hydra.run.dir={run_dir}",
            *extra,
        ]
    )


def error_line(res) -> str:
    """The CLI's refusal: exit status 1, no traceback, one ``error: ...`` line on stderr."""
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and "Traceback" not in res.stdout + res.stderr, res.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-3000:]
    return lines[0]


def evaluate(ckpt, *extra):
    return run_cli(["evaluate.py", f"ckpt_path={ckpt}", *extra])


def snapshot(run_dir) -> dict:
    """Every path under ``run_dir``, with the bytes of each file (``None`` for a folder)."""
    return {p.relative_to(run_dir).as_posix(): p.read_bytes() if p.is_file() else None for p in run_dir.rglob("*")}


# ---------------------------------------------------------------------------- 7: a changed data file
@pytest.mark.slow
def test_a_changed_data_file_is_noticed_by_the_rerun_and_by_evaluate(tmp_path):
    data, run = write_data(tmp_path / "data.npz"), tmp_path / "run"
    assert g(data, run).returncode == 0
    ckpt = run / "checkpoints" / "last.ckpt"
    same = evaluate(ckpt)  # the data as trained on: no warning
    assert same.returncode == 0 and "differ from those" not in same.stdout + same.stderr
    (tmp_path / "copy").mkdir()  # the same bytes elsewhere (another machine's data_dir): still the same data
    (tmp_path / "copy" / "data.npz").write_bytes(data.read_bytes())
    moved = evaluate(ckpt, f"data_dir={tmp_path / 'copy'}", f"output_dir={tmp_path / 'eval_copy'}")
    assert moved.returncode == 0 and "differ from those" not in moved.stdout + moved.stderr
    metrics = (run / "metrics.json").read_bytes()

    write_data(data, seed=1, noise=True)
    line = error_line(g(data, run))  # not "skipping" with the old metrics
    assert line.startswith(f"error: {run} holds a run of other data: {data} has changed since")
    assert "it was left as it is" in line and (run / "metrics.json").read_bytes() == metrics

    res = evaluate(ckpt)
    assert res.returncode == 0, res.stderr[-2000:]
    warned = [ln for ln in (res.stdout + res.stderr).splitlines() if "differ from those" in ln]
    assert len(warned) == 1 and f"the data differ from those {ckpt} was trained on: {data} has changed" in warned[0]
    assert json.loads((run / "eval" / "metrics.json").read_text())["test/acc"] < 0.8  # scored on the noise


@pytest.mark.parametrize(
    "overrides,multirun,key",
    [
        (["seed=1"], False, "experiment_name"),  # the default directory is named by experiment_name
        (["hydra.run.dir=/x", "seed=1"], False, "hydra.run.dir"),
        (["hydra.run.dir=/x", "paths.output_dir=/y"], False, "paths.output_dir"),
        (["hydra.run.dir=/x"], True, "experiment_name"),  # a sweep's directories are not hydra.run.dir
        (["hydra.sweep.dir=/x"], True, "hydra.sweep.dir"),
        (["hydra.sweep.dir=/x", "hydra.sweep.subdir=s"], True, "hydra.sweep.subdir"),
    ],
)
def test_the_advice_of_a_refusal_names_the_key_that_named_the_run_directory(overrides, multirun, key):
    """N108: the refusal advised `another experiment_name=...`, which cannot help when hydra.run.dir is given."""
    assert rename_key(overrides, multirun) == key
    assert rename_key() == "paths.output_dir"  # outside a Hydra job (the Python API)


# ---------------------------------------------------------------------------- 8: a refused re-run changes nothing
@pytest.mark.slow
def test_a_refused_or_skipped_rerun_leaves_every_byte_of_the_finished_run(tmp_path):
    """Hydra writes its record (.hydra/) and opens train.log before the job runs; a job refused for
    another config, or skipped as done, must still leave the finished run exactly as it was."""
    data, run = write_data(tmp_path / "data.npz"), tmp_path / "run"
    assert g(data, run).returncode == 0
    before = snapshot(run)
    assert {".hydra/config.yaml", ".hydra/overrides.yaml", "train.log", "metrics.json", "config.yaml"} <= set(before)
    line = error_line(g(data, run, "seed=1"))
    assert line.startswith(f"error: {run} holds a run of another config (differs at seed)")  # N108: what the user set
    assert "it was left as it is" in line
    assert line.endswith("give this job another hydra.run.dir=...")  # N108: advice that works with hydra.run.dir
    assert snapshot(run) == before
    assert error_line(g(data, run, "seed=1", "hydra/job_logging=stdout")).startswith(line[:40])  # any logging
    assert snapshot(run) == before
    skipped = g(data, run)  # the same job: skipped as done, nothing rewritten
    assert skipped.returncode == 0 and "skipping" in skipped.stdout + skipped.stderr
    assert snapshot(run) == before


@pytest.mark.slow
@pytest.mark.parametrize("trained", [4, 3])
def test_a_resume_with_fewer_epochs_than_trained_is_one_line_and_changes_nothing(tmp_path, trained):
    """Lightning stops a resume of 4 trained epochs at max_epochs=2 with a traceback, and one of 3 trained
    epochs tests the 3-epoch model as a run of 2; both stop in one line before anything is written."""
    data, run = write_data(tmp_path / "data.npz"), tmp_path / "run"
    assert g(data, run, "test=false", epochs=trained).returncode == 0  # trained, not tested: resumable
    before = snapshot(run)
    line = error_line(g(data, run, epochs=2))
    last = run / "checkpoints" / "last.ckpt"
    assert line.startswith(
        f"error: cannot resume from {last}: it has trained {trained} epochs, more than "
        "trainer.max_epochs=2; nothing was changed"
    )
    assert snapshot(run) == before


# ---------------------------------------------------------------------------- 10: a resume raising max_epochs
@pytest.mark.slow
def test_a_resume_may_raise_max_epochs_of_an_mnp_run_with_its_derived_warmup(tmp_path):
    """MNP on custom data derives its warm-up from trainer.max_epochs (a quarter, rounded: 0 of 2, 1 of 3 or
    4). A resume is compared by what the user set: raising max_epochs resumes (twice in a row), keeping the
    run's warm-up; a warm-up the user sets is still compared."""
    data, run = write_data(tmp_path / "data.npz"), tmp_path / "run"
    small = ["model.encoder.d_e=16", "model.decoder.num_samples=2", "eval.noise=false"]
    assert g(data, run, *small, "test=false", model="mnp").returncode == 0  # 2 epochs, then stopped before testing
    line = error_line(g(data, run, *small, "model.warmup.epochs=1", model="mnp", epochs=4))
    assert line.startswith(f"error: {run} holds a run of another config (differs at model.warmup.epochs)")
    again = g(data, run, *small, "test=false", model="mnp", epochs=3)
    assert again.returncode == 0, again.stderr[-2000:]
    res = g(data, run, *small, model="mnp", epochs=4)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"resuming from {run / 'checkpoints' / 'last.ckpt'}" in res.stdout
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 4
    saved = OmegaConf.load(run / "config.yaml")
    assert saved.trainer.max_epochs == 4 and saved.model.warmup.epochs == 0  # the run's own warm-up
    assert re.findall(r"main epoch (\d)/4", res.stdout) == ["4"]  # only the 4th epoch was trained here
    line = error_line(g(data, run, *small, model="mnp", epochs=6))  # a finished run is not extended
    assert line.startswith(f"error: {run} holds a run of another config (differs at trainer.max_epochs);")


# ---------------------------------------------------------------------------- the checkpoint folder
@pytest.mark.slow
def test_a_file_named_checkpoints_is_one_line_before_training(tmp_path):
    """Not "is the disk full?" after the first epoch: the file is named, before anything is trained."""
    data, run = write_data(tmp_path / "data.npz"), tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").write_text("my notes")
    res = g(data, run)
    assert error_line(res) == (
        f"error: {run / 'checkpoints'} is a file, not a directory, so no checkpoint can be "
        "written there; move it away, or set callbacks.checkpoint.every_n_epochs=0 for no "
        f"checkpoints (traceback in {run / 'train.log'})"
    )
    assert "epoch 1/2" not in res.stdout and not (run / "config.yaml").exists()
    assert (run / "checkpoints").read_text() == "my notes"


def test_a_real_datasets_record_holds_its_data_file_and_split_files(tmp_path, real_file):
    """PIE: the .mat and the two split-index files, each with its sha256 (as a run records them)."""
    import hashlib

    from cfg_utils import compose_train

    from mnp.cli.builders import make_datamodule
    from mnp.runs.datahash import data_hashes

    files = [
        real_file("pie", name) for name in ("PIE_face_10.mat", "PIE_face_10_train_idx.npy", "PIE_face_10_test_idx.npy")
    ]
    cfg = compose_train(tmp_path, ["model=mlp", "dataset=pie", f"paths.data_dir={files[0].parent.parent}"])
    _, dm = make_datamodule(cfg)
    assert dm.data_files() == files
    # keyed by absolute path, also where MNP_DATA_DIR is relative (as in .ci/run)
    assert data_hashes(dm.data_files()) == {
        str(f.absolute()): hashlib.sha256(f.read_bytes()).hexdigest() for f in files
    }
