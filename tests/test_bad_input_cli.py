"""Bad input end to end: every case ends with one line ``error: ...`` naming what is wrong and where,
exit status 1, no traceback and no outputs (no metrics.json, predictions.npz, config.yaml or checkpoints).

Most cases call the CLI's guard (:func:`mnp.cli.cli.run_guarded`) in-process on a composed config; a
subprocess run checks the real ``train.py`` (its one line, the traceback in train.log). The same for
``evaluate.py``: tests/test_bad_input_cli_evaluate.py; data that is odd but usable trains with warnings:
tests/test_bad_input_cli_odd_data.py.
"""

import os
import shutil

import numpy as np
import pytest
import scipy.io
from cfg_utils import compose_train
from cli_utils import assert_no_outputs, guarded_error, hydra_only, run_cli

from mnp.cli.pipeline import train

FAST = ["trainer.max_epochs=1", "eval.noise=false", "skip_if_done=false", "ckpt_path=null"]
SMALL_MNP = ["model=mnp", "model.encoder.d_e=16", "model.warmup.epochs=0", "model.decoder.num_samples=2"]

pytestmark = pytest.mark.usefixtures("no_full_error")


# ---------------------------------------------------------------------------- data files
def tiny(seed=0, dims=(5, 3), n_per_class=12, k=3):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(k), n_per_class)
    return [rng.normal(size=(len(y), d)) + 3.0 * y[:, None] for d in dims], y


def npz(path, views, y, **extra):
    np.savez(path, **{f"x{i + 1}": v for i, v in enumerate(views)}, y=y, **extra)
    return path


def truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    return path


def cell(arrays):
    c = np.empty((1, len(arrays)), dtype=object)
    for i, a in enumerate(arrays):
        c[0, i] = a
    return c


def with_value(view, row, col, value):
    views, y = tiny()
    views[view][row, col] = value
    return views, y


def make_case(case, d):
    """Writes the bad input of ``case`` into ``d``; returns (overrides, expected message fragment)."""
    views, y = tiny()
    custom = lambda p, *more: ["dataset=custom", f"dataset.path={p}", *more]  # noqa: E731
    if case == "truncated npz":
        p = truncated(npz(d / "data.npz", views, y))
        return custom(p), f"{p}: file is corrupt or truncated"
    if case == "truncated mat":
        p = d / "data.mat"
        scipy.io.savemat(p, {"X": cell([v.T for v in views]), "gt": y[:, None] + 1}, do_compression=True)
        return custom(truncated(p)), f"{p}: file is corrupt or truncated"
    if case == "nan":
        p = npz(d / "data.npz", *with_value(1, 7, 2, np.nan))
        return custom(p), f"{p}: view 2 has 1 NaN/inf values (first at row 7, column 2)"
    if case == "inf":
        p = npz(d / "data.npz", *with_value(0, 3, 0, -np.inf))
        return custom(p), f"{p}: view 1 has 1 NaN/inf values (first at row 3, column 0)"
    if case == "zero columns":
        p = npz(d / "data.npz", [views[0], np.zeros((36, 0))], y)
        return custom(p), f"{p}: view 2 has zero feature columns"
    if case == "non-integer labels":
        yy = y.astype(float)
        yy[5] = 1.5
        p = npz(d / "data.npz", views, yy)
        return custom(p), f"{p}: labels must be integers (row 5 is 1.5)"
    if case == "negative labels":
        yy = y.copy()
        yy[4] = -1
        p = npz(d / "data.npz", views, yy)
        return custom(p), f"{p}: labels must be non-negative (row 4 is -1)"
    if case == "ood class out of range":
        p = npz(d / "data.npz", views, y)
        return custom(p, "dataset.ood_classes=[7]"), f"{p}: ood_classes [7] are not labels of this dataset (0..2)"
    if case == "class without training samples":
        p = npz(d / "data.npz", views, y, train_idx=np.flatnonzero(y < 2), test_idx=np.flatnonzero(y == 2))
        return custom(p), f"{p}: class(es) [2] have no training samples"
    if case == "row counts differ":
        p = npz(d / "data.npz", [views[0], views[1][:-1]], y)
        return custom(p), f"{p}: view x2 has shape (35, 3); expected (36, d) to match y"
    if case == "train/test dims differ":
        p = d / "pre.mat"
        scipy.io.savemat(
            p, {"x1_train": views[0][:30], "x1_test": views[1][30:], "gt_train": y[:30, None], "gt_test": y[30:, None]}
        )
        return custom(p), f"{p}: view 1 has 5 features in x1_train but 3 in x1_test"
    if case == "train/test view counts differ":
        p = d / "pre.mat"
        scipy.io.savemat(
            p,
            {
                "x1_train": views[0][:30],
                "x2_train": views[1][:30],
                "x1_test": views[0][30:],
                "gt_train": y[:30, None],
                "gt_test": y[30:, None],
            },
        )
        return custom(p), f"{p}: pre-split file lacks key 'x2_test'"
    if case == "wrong sha256":
        (d / "pie").mkdir()
        dest = d / "pie" / "PIE_face_10.mat"
        real = os.path.join(os.environ.get("MNP_DATA_DIR", "/nonexistent"), "pie", "PIE_face_10.mat")
        if os.path.isfile(real):  # a real copy with one byte appended: it would still parse
            shutil.copyfile(real, dest)
            dest.chmod(0o644)
            with open(dest, "ab") as f:
                f.write(b"\0")
        else:
            dest.write_bytes(b"\0" * 1000)
        return ["dataset=pie", f"paths.data_dir={d}", "dataset.download=false"], f"{dest}: sha256 mismatch"
    if case == "unknown scaling":
        p = npz(d / "data.npz", views, y)
        return custom(p, "dataset.scaling=weird"), "unknown scaling 'weird'; choose minmax, standard or none"
    if case == "unknown split":
        p = npz(d / "data.npz", views, y)
        return custom(p, "dataset.split=weird"), "unknown split 'weird'; choose one of files, stratified"
    if case == "noise subset larger than the views":
        p = npz(d / "data.npz", views, y)
        return custom(
            p, "eval.noise=true", "eval.noise_subset_size=5"
        ), "eval.noise_subset_size must lie in [1, 2] (the data has 2 views), got 5"
    if case in ("seed too large", "negative seed"):  # numpy's words named neither the key nor the range
        value = 2**32 if case == "seed too large" else -1
        return [f"seed={value}"], f"seed must be an integer in [0, 4294967295], got {value}"
    if case == "unknown memory.update":
        return [
            *SMALL_MNP,
            "model.memory.update=weird",
        ], "unknown model.memory.update 'weird'; choose one of mse, ce, fifo, random"
    if case == "unknown aggregation":
        return [
            *SMALL_MNP,
            "model.aggregation.kind=weird",
        ], "unknown model.aggregation.kind 'weird'; choose one of mba, mean, concat"
    if case == "negative clip_norm":  # trained by gradient ascent to chance accuracy and exited 0
        return [*SMALL_MNP, "model.optim.clip_norm=-0.1"], "model.optim.clip_norm must be > 0 (or null), got -0.1"
    if case == "negative l2":  # a loss of -1e4
        return [*SMALL_MNP, "model.loss.l2=-1"], "model.loss.l2 must be >= 0, got -1"
    if case == "zero hidden units":
        return ["model=de_ef", "model.hidden=[16,0]"], "model.hidden must be a list of integers >= 1, got [16, 0]"
    if case == "negative learning rate":
        return ["model=tmc", "model.optim.lr=-0.003"], "model.optim.lr must be > 0, got -0.003"
    if case == "unknown model key":
        return [
            "model=mlp",
            "+model.bogus=1",
        ], "model: unknown key 'bogus' for baselines.mlp.MLP; valid keys: hidden, dropout, optim"
    if case == "unknown dataset key":
        return (
            ["+dataset.bogus=1"],
            "dataset: unknown key 'bogus' for datamodules.synthetic.TwoMoons; valid keys: "
            "n_train, n_test, noise, num_views, batch_size, eval_batch_size, scaling",
        )
    raise AssertionError(case)


CASES = [
    "truncated npz",
    "truncated mat",
    "nan",
    "inf",
    "zero columns",
    "non-integer labels",
    "negative labels",
    "ood class out of range",
    "class without training samples",
    "row counts differ",
    "train/test dims differ",
    "train/test view counts differ",
    "wrong sha256",
    "unknown scaling",
    "unknown split",
    "noise subset larger than the views",
    "negative clip_norm",
    "negative l2",
    "zero hidden units",
    "negative learning rate",
    "unknown memory.update",
    "unknown aggregation",
    "unknown model key",
    "unknown dataset key",
    "seed too large",
    "negative seed",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_gives_one_line_exit_1_and_no_outputs(tmp_path, capsys, case):
    data, out = tmp_path / "data", tmp_path / "run"
    data.mkdir()
    overrides, expected = make_case(case, data)
    model = [] if any(o.startswith("model") or o.startswith("+model") for o in overrides) else ["model=mlp"]
    line = guarded_error(train, compose_train(out, [*model, *FAST, *overrides]), capsys)
    assert expected in line
    assert_no_outputs(out)


UNTRAINED = "the run would train on no batch and report an untrained model"


@pytest.mark.parametrize(
    "override,expected",
    [
        (
            "+trainer.limit_train_batches=0",
            f"trainer.limit_train_batches must be an integer >= 1 (batches) or a fraction "
            f"in (0, 1], got 0: {UNTRAINED}",
        ),
        ("+trainer.limit_train_batches=0.0", f"in (0, 1], got 0.0: {UNTRAINED}"),
        (
            "+trainer.limit_train_batches=0.001",
            "trainer.limit_train_batches=0.001 keeps 0 of the 5 training batches per "
            f"epoch: {UNTRAINED}; set it to at least 0.2 or leave it out",
        ),
        ("+trainer.max_steps=0", f"trainer.max_steps must be -1 (no limit) or an integer >= 1, got 0: {UNTRAINED}"),
        (
            "+trainer.limit_test_batches=0",
            "trainer.limit_test_batches must be an integer >= 1 (batches) or a fraction in "
            "(0, 1], got 0: the run would train, then test on no batch and record no metrics",
        ),
    ],
)
def test_a_run_that_would_train_on_no_batch_is_refused(tmp_path, capsys, override, expected):
    """Before training: metrics of an untrained model (labelled with the epochs it did not train) never appear."""
    out = tmp_path / "run"
    line = guarded_error(train, compose_train(out, ["model=mlp", *FAST, override]), capsys)
    assert expected in line
    assert_no_outputs(out)


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (
            ["model.optim.schedule=bogus"],
            "unknown model.optim.schedule 'bogus'; choose one of constant, piecewise, linear",
        ),
        (
            ["model.optim.schedule=piecewise", "model.optim.values=[0.1]", "model.optim.milestones=[2]"],
            "model.optim: piecewise schedule needs len(values) == len(milestones) + 1, got [0.1] / [2]",
        ),
        (["model.optim.eps_placement=bogus"], "unknown model.optim.eps_placement 'bogus'; choose one of torch, keras"),
    ],
)
def test_bad_optimiser_settings_are_refused_before_anything_is_written(tmp_path, capsys, overrides, expected):
    """N95: refused in configure_optimizers, after config.yaml was written into the run directory."""
    out = tmp_path / "run"
    line = guarded_error(train, compose_train(out, ["model=mnp", *FAST, *overrides]), capsys)
    assert line == f"error: {expected}"
    assert_no_outputs(out)


def test_trainer_keys_a_manual_optimisation_cannot_honour_are_refused_for_mnp_only(tmp_path, capsys):
    """MNP runs its own optimisation step: Lightning's accumulation and clipping would raise in fit (a 60-line
    traceback) or be ignored; the line names the key and model.clip_norm. The MLP (automatic) accepts them."""
    why = "cannot apply to model mnp, which runs its own optimisation step; remove it"
    for override, expected in [
        ("+trainer.accumulate_grad_batches=2", f"trainer.accumulate_grad_batches=2 {why} (a larger dataset.batch_size"),
        (
            "+trainer.gradient_clip_val=1.0",
            f"trainer.gradient_clip_val=1.0 {why} and set model.optim.clip_norm=<max norm>",
        ),
        (
            "+trainer.gradient_clip_algorithm=value",
            f"trainer.gradient_clip_algorithm=value {why} and set model.optim.clip_norm",
        ),
    ]:
        out = tmp_path / override.split(".")[1].split("=")[0]
        line = guarded_error(train, compose_train(out, [*SMALL_MNP, *FAST, override]), capsys)
        assert line.startswith(f"error: {expected}"), line
        assert_no_outputs(out)
    mlp = train(
        compose_train(
            tmp_path / "mlp",
            ["model=mlp", *FAST, "+trainer.accumulate_grad_batches=2", "+trainer.gradient_clip_val=1.0"],
        )
    )
    assert mlp["epochs"] == 1


# ---------------------------------------------------------------------------- the real CLI
@pytest.mark.slow
def test_cli_truncated_file_one_line_exit_1_no_outputs_traceback_in_train_log(tmp_path):
    views, y = tiny()
    path = truncated(npz(tmp_path / "data.npz", views, y))
    run_dir = tmp_path / "run"
    r = run_cli(
        ["train.py", "model=mlp", "dataset=custom", f"dataset.path={path}", f"hydra.run.dir={run_dir}", "logger=none"]
    )
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()
    assert err[-1].startswith(f"error: {path}: file is corrupt or truncated (") and err[-1].endswith(
        f"); re-download or replace it (traceback in {run_dir / 'train.log'})"
    )
    assert "Traceback" not in r.stderr + r.stdout  # on the console: one line
    assert (r.stdout + r.stderr).count("file is corrupt or truncated") == 1  # not echoed as a log line on stdout
    log = (run_dir / "train.log").read_text()  # in the log: where it was raised, should it be a bug
    assert "Traceback (most recent call last):" in log and 'datamodules/formats.py", line' in log
    assert hydra_only(run_dir)
