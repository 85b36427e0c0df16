"""Reliability round five (issue 49): run directories (symlinked, read-only, moved), user-given paths, SIGTERM in
the test's epoch-end stages, temperature scaling's rows and the per-view metrics."""

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import warnings

import numpy as np
import pytest
from cfg_utils import compose_train
from cli_utils import guarded_error, run_cli
from test_checkpointing import MLP_RUN, eval_cfg
from test_checkpointing_evaluation import SMALL_MNP
from test_run_records import error_line, evaluate, g, snapshot, write_data

from mnp.cli.cli import run_guarded
from mnp.cli.pipeline import evaluate as evaluate_run
from mnp.cli.pipeline import train
from mnp.eval import calibration
from mnp.eval.per_view import PerView

pytestmark = pytest.mark.usefixtures("one_thread")

CUSTOM = ["model=mlp", "dataset=custom", "trainer.max_epochs=2", "eval.noise=false", "skip_if_done=false"]
CAL = "eval.calibration=temperature"


@pytest.mark.slow
def test_a_train_log_link_planted_in_an_unfinished_run_is_replaced_and_its_target_untouched(tmp_path):
    """F06 (severe): Hydra's file handler appended the job's log through a planted train.log link."""
    data, run = write_data(tmp_path / "data.npz"), tmp_path / "run"
    assert g(data, run).returncode == 0
    (run / "metrics.json").unlink()
    victim = tmp_path / "victim.txt"
    victim.write_text("VICTIM LOG\n")
    (run / "train.log").unlink()
    (run / "train.log").symlink_to(victim)
    res = g(data, run, epochs=3)
    assert res.returncode == 0, res.stderr[-3000:]
    assert victim.read_text() == "VICTIM LOG\n"
    log = run / "train.log"
    assert not log.is_symlink() and "resuming from" in log.read_text()
    assert f"{log} was a symbolic link; it is now a file of this run" in log.read_text()
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 3


def _terminated_in(monkeypatch, owner, name):
    """SIGTERM to this process inside ``owner.name`` (its first call), which then runs on."""
    original = getattr(owner, name)

    def stage(*args, **kwargs):
        if not hit:
            hit.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    hit: list[int] = []
    monkeypatch.setattr(owner, name, stage)
    return hit


@pytest.mark.slow
@pytest.mark.parametrize(
    "stage, overrides",
    [
        ("temperature fit", [*MLP_RUN, "dataset.val_fraction=0.2", "eval.calibration=temperature"]),
        ("per-view step", [*SMALL_MNP, "dataset.n_test=40"]),
    ],
)
def test_sigterm_in_the_tests_epoch_end_stages_ends_with_143_and_no_metrics(
    tmp_path, monkeypatch, capsys, stage, overrides
):
    """T09, P04: SIGTERM inside the temperature fit (on_test_epoch_end) or the per-view step of the last test batch
    was ignored: status 0 and every output written."""
    owner, name = (calibration, "fit_temperature") if stage == "temperature fit" else (PerView, "step")
    hit = _terminated_in(monkeypatch, owner, name)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        run_guarded(train, compose_train(run, [*overrides, "trainer.max_epochs=2"]))
    assert hit and e.value.code == 143
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: terminated by SIGTERM during testing; re-run the same command to test the trained "
        f"model ({run / 'checkpoints' / 'last.ckpt'} holds all 2 epochs)"
    ]
    assert not (run / "metrics.json").exists() and not (run / "predictions.npz").exists()


def _one_class_validation(path):
    """Train rows of class 0 but for two rows each of classes 1 and 2: a small stratified validation split is
    all class 0 (round 5's val_oneclass.npz)."""
    rng = np.random.default_rng(0)
    y = np.r_[np.zeros(100, int), [1, 1, 2, 2], rng.integers(0, 3, 60)]
    views = {f"x{i}": rng.normal(size=(len(y), d)) + y[:, None] for i, d in ((1, 8), (2, 5))}
    np.savez(path, **views, y=y, train_idx=np.arange(104), test_idx=np.arange(104, 164))
    return path


@pytest.mark.parametrize(
    "data, fraction, rows",
    [
        (write_data, 0.05, "6 validation rows of 3 classes"),
        (_one_class_validation, 0.05, "5 validation rows of 1 class"),
    ],
)
def test_temperature_scaling_on_too_few_validation_rows_or_one_class_is_refused_before_training(
    tmp_path, capsys, data, fraction, rows
):
    """T02, T03: T was fitted on 2 validation rows, or on rows of one class, with only an edge-of-range warning."""
    path, run = data(tmp_path / "data.npz"), tmp_path / "run"
    cfg = compose_train(run, [*CUSTOM, f"dataset.path={path}", f"dataset.val_fraction={fraction}", CAL])
    assert guarded_error(train, cfg, capsys) == (
        f"error: eval.calibration=temperature fits T on the validation rows, and the data give {rows} (T needs at "
        "least 10 rows of 2 or more classes): set a larger dataset.val_fraction"
    )
    assert not run.exists()  # nothing written: the run directory made for the job is gone


def test_metrics_json_records_the_rows_and_classes_that_fitted_t(tmp_path):
    """T02: nothing said how many validation rows and classes T came from."""
    path = write_data(tmp_path / "data.npz")
    res = train(compose_train(tmp_path / "run", [*CUSTOM, f"dataset.path={path}", "dataset.val_fraction=0.2", CAL]))
    recorded = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (
        (recorded["calibration/n_rows"], recorded["calibration/n_classes"])
        == (18, 3)
        == (
            res["calibration/n_rows"],
            res["calibration/n_classes"],
        )
    )


@pytest.mark.slow
def test_evaluate_calibration_of_a_run_without_validation_rows_advises_retraining(tmp_path):
    """T07: the advice `set dataset.val_fraction > 0` named a key evaluate.py cannot take."""
    data, run = write_data(tmp_path / "data.npz"), tmp_path / "run"
    assert g(data, run).returncode == 0
    ckpt = run / "checkpoints" / "last.ckpt"
    line = error_line(evaluate(ckpt, "+eval.calibration=temperature"))
    assert line == (
        f"error: +eval.calibration=temperature fits T on the run's validation rows, and the run of {ckpt} has no "
        "validation rows (T needs at least 10 rows of 2 or more classes): re-train it with dataset.val_fraction > 0 "
        f"(train.py) to calibrate it (traceback in {run}/eval_calibration=temperature/evaluate.log)"
    )
    assert not (run / "eval_calibration=temperature" / "metrics.json").exists()


def test_single_view_data_get_no_per_view_keys_beside_the_fused_ones(tmp_path):
    """P01: view/acc@v0 (0.683) disagreed with test/acc (0.717) for the same posterior, from another draw."""
    res = train(compose_train(tmp_path / "run", [*SMALL_MNP, "dataset.num_views=1", "trainer.max_epochs=2"]))
    assert "test/acc" in res
    assert [k for k in res if k.startswith("view/")] == []
    with np.load(tmp_path / "run" / "predictions.npz") as arrays:
        assert not [k for k in arrays.files if k.startswith("view/")]


def test_the_summary_shows_the_whole_evaluations_time_beside_the_clean_pass(tmp_path, caplog):
    """P08: `test time 0.07 s` for a 40 s test: time/test_s is one clean pass, without the protocols' cost."""
    caplog.set_level(logging.INFO, logger="mnp")
    res = train(compose_train(tmp_path / "run", [*SMALL_MNP, "dataset.n_test=40", "trainer.max_epochs=2"]))
    assert 0 < res["time/test_s"] < res["time/eval_s"] < res["time/total_s"]
    assert re.search(
        rf"\n  evaluation time +{res['time/eval_s']:.2f} s \(the whole test, every protocol\)\n", caplog.text
    )
    assert re.search(rf"\n  clean test pass +{res['time/test_s']:.2f} s \(its predict calls\)\n", caplog.text)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["../escaped", "a/b", "..", "a\\b"])
def test_an_experiment_name_that_is_not_one_folder_name_is_refused_before_any_folder_is_made(tmp_path, name):
    """P2: experiment_name=../../escaped_exp wrote the run outside paths.log_dir."""
    res = run_cli(["train.py", "model=mlp", f"experiment_name={name}", f"paths.log_dir={tmp_path / 'logs'}"])
    assert error_line(res) == (
        f"error: experiment_name={name!r} must be one folder name under paths.log_dir (no '/', '\\', '..' or "
        "leading '.'); to write elsewhere, set paths.log_dir"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["csv", "..", "../../.."])
def test_an_evaluation_output_dir_inside_a_run_or_holding_runs_is_refused_and_nothing_written(tmp_path, capsys, where):
    """E1, E2: output_dir=<run>/csv wrote into the run's csv/, <run>/.. into the experiment's runs/."""
    run = tmp_path / "logs" / "exp" / "runs" / "run"
    train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=1"]))
    before = snapshot(tmp_path)
    out = run / where
    line = guarded_error(evaluate_run, eval_cfg(run / "checkpoints" / "last.ckpt", out), capsys)
    if where == "csv":
        assert line == (
            f"error: output_dir {out} is inside the training run {run}, which an evaluation writes into only "
            "through its eval_* folders; leave output_dir unset (the evaluation goes into the run's eval_* folder) "
            "or choose a folder outside any run"
        )
    else:
        held = os.path.relpath(run, out.resolve())
        assert line == (
            f"error: output_dir {out} holds training runs ({held}); an evaluation writes into a folder of its own: "
            "choose another output_dir"
        )
    assert snapshot(tmp_path) == before


@contextlib.contextmanager
def read_only(folder):
    """``folder`` read-only: a read-only bind mount as root (chmod does not stop root), else chmod a-w. Yields the
    error a write there gets."""
    if os.geteuid() != 0:
        folders = [folder, *(p for p in folder.rglob("*") if p.is_dir())]
        for p in folders:
            p.chmod(0o555)
        try:
            yield "Permission denied"
        finally:
            for p in folders:
                p.chmod(0o755)
        return
    if subprocess.run(["mount", "--bind", folder, folder], capture_output=True).returncode:
        pytest.skip("running as root without a bind mount: no way to make a folder read-only")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", folder], check=True, capture_output=True)
        yield "Read-only file system"
    finally:
        subprocess.run(["umount", folder], check=True)


@pytest.mark.slow
def test_a_read_only_run_is_skipped_when_finished_and_refused_in_one_line_otherwise(tmp_path):
    """F03, F04: a read-only run dir gave a 57-line Hydra traceback (`Unable to configure handler 'file'`), even
    where the job would only be skipped."""
    data, run = write_data(tmp_path / "data.npz"), tmp_path / "run"
    assert g(data, run).returncode == 0
    before, ckpt = snapshot(run), run / "checkpoints" / "last.ckpt"
    with read_only(run) as why:
        skipped = g(data, run)
        assert skipped.returncode == 0 and "skipping" in skipped.stdout + skipped.stderr, skipped.stderr[-2000:]
        assert error_line(g(data, run, "skip_if_done=false")) == (
            f"error: output directory {run} is not writable ({why}); set paths.log_dir or hydra.run.dir to a "
            "writable place"
        )
        assert error_line(evaluate(ckpt)) == (
            f"error: cannot create the evaluation folder {run / 'eval'}: {why}; set output_dir to a writable place"
        )
        elsewhere = evaluate(ckpt, f"output_dir={tmp_path / 'ev'}")
        assert elsewhere.returncode == 0, elsewhere.stderr[-2000:]
    assert snapshot(run) == before
    assert {"metrics.json", "evaluate.log", ".hydra"} <= {p.name for p in (tmp_path / "ev").iterdir()}


def test_a_moved_unfinished_run_resumes_quietly(tmp_path, caplog):
    """MOVED: each resume of a copied run warned that best_model_path named the old place (the crafted-checkpoint
    warning) and that Lightning's dirpath had changed: a false alarm on a legitimate move."""
    old, new = tmp_path / "old", tmp_path / "new"
    run = [*MLP_RUN, "dataset.val_fraction=0.2"]
    train(compose_train(old, [*run, "trainer.max_epochs=1", "test=false"]))
    shutil.copytree(old, new)
    shutil.rmtree(old)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = train(compose_train(new, [*run, "trainer.max_epochs=2"]))
    assert res["epochs"] == 2
    assert "not restored" not in caplog.text, caplog.text
    assert not [w for w in caught if "dirpath" in str(w.message)], [str(w.message) for w in caught]
