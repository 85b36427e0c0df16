"""Bad data and dataset values through the CLI: each ends in one ``error: ...`` line naming the file,
view or key, exit status 1 and no outputs, found before training. A label of 10⁹ trains.

The cases run through the CLI's guard in-process (:func:`mnp.cli.cli.run_guarded` on a composed config,
what ``train.py`` calls); the ones that used to fail during or after training, or to exhaust memory,
also run as real ``train.py`` subprocesses.
"""

import os
import time
from pathlib import Path

import numpy as np
import pytest
from cfg_utils import compose_train
from cli_utils import assert_no_outputs, guarded_error, hydra_only, run_cli
from zip_utils import deflate_bomb

from mnp.cli.pipeline import train

G = ["model=mlp", "trainer.max_epochs=2", "dataset=custom", "eval.noise=false", "skip_if_done=false", "ckpt_path=null"]


@pytest.fixture(autouse=True)
def no_full_error(monkeypatch, one_thread):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)


def good(n_per_class=100, labels=(0, 1, 2), seed=0):
    """2 separable views and labels ``labels`` (n_per_class each)."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(len(labels)), n_per_class)
    views = [rng.normal(size=(len(y), d)) + 2.0 * y[:, None] for d in (4, 3)]
    return views, np.asarray(labels)[y]


def write(path, views, y):
    np.savez(path, **{f"x{i + 1}": v for i, v in enumerate(views)}, y=y)
    return path


def make_case(case, d):
    """Writes the data of ``case`` into ``d``; returns (path, extra overrides, expected error line)."""
    views, y = good()
    p = d / "data.npz"
    if case == "one sample per class":
        write(p, [v[::100] for v in views], y[::100])
        return p, [], f"{p}: the test split is empty: every class has one sample, which stays in training; add samples"
    if case == "two samples per class":
        write(p, [v[::50] for v in views], y[::50])
        return (
            p,
            [],
            f"{p}: the test split is empty: dataset.test_fraction=0.2 of at most 2 samples per class "
            "rounds to 0; add samples or raise it (+dataset.test_fraction=...)",
        )
    if case == "overflow":
        write(p, [views[0], views[1] * 1e307], y)
        return p, [], f"{p}: view 2 overflowed in scaling (dataset.scaling=standard): its values, up to "
    if case == "complex view":
        write(p, [views[0] * (1 + 1j), views[1]], y)
        return p, [], f"{p}: view x1 is complex-valued (dtype complex128); its imaginary part would be lost"
    if case == "object array":
        write(p, [views[0].astype(object), views[1]], y)
        return p, [], f"{p}: x1 holds Python objects (dtype object); save numeric arrays"
    if case == "not a zip":
        p.write_text("x1,x2,y\n0.5,0.1,0\n")
        return p, [], f"{p}: the format could not be recognised (not a zip archive, so not an .npz); accepted: "
    if case == "directory":
        return d, [], f"{d} is a directory, not a data file; accepted: "
    if case == "fifo":  # reading it would block: refused from its type, not opened (it was "not found")
        os.mkfifo(d / "pipe.npz")
        return d / "pipe.npz", [], f"{d / 'pipe.npz'} is a FIFO (named pipe), not a regular data file; accepted: .npz"
    if case == "/dev/zero":  # reading it would never end
        return Path("/dev/zero"), [], "/dev/zero is a character device, not a regular data file; accepted: .npz"
    if case == "deflate bomb":
        deflate_bomb(p, rows=1000, declared_rows=2**40, y=y[:1000])
        return p, [], f"{p}: loading x1 would take the arrays to 8796.1 GB in memory, over 25% of the "
    write(p, views, y)
    key, value = case.split("=")
    expected = f"{key.lstrip('+')} must be " + (
        "an integer >= 1" if "batch" in key else "a fraction in (0, 1)" if "test" in key else "a fraction in [0, 1)"
    )
    return p, [case], f"{expected}, got {value}"


CASES = [
    "one sample per class",
    "two samples per class",
    "overflow",
    "complex view",
    "object array",
    "not a zip",
    "directory",
    "fifo",
    "/dev/zero",
    "deflate bomb",
    "dataset.batch_size=0",
    "dataset.batch_size=-1",
    "dataset.val_fraction=1.0",
    "dataset.val_fraction=-0.5",
    "+dataset.test_fraction=0",
    "+dataset.test_fraction=1.5",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_data_or_dataset_value_gives_one_line_before_training(tmp_path, capsys, case):
    path, extra, expected = make_case(case, tmp_path)
    out = tmp_path / "run"
    line = guarded_error(train, compose_train(out, [*G, f"dataset.path={path}", *extra]), capsys)
    assert line.startswith(f"error: {expected}"), line
    assert "pickled" not in line and "not found" not in line and "training loss" not in line
    assert_no_outputs(out)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["two samples per class", "overflow", "deflate bomb", "fifo"])
def test_cli_one_line_exit_1_only_hydra_files(tmp_path, case):
    """Used to end in an AttributeError traceback after training, in an error blaming the training
    loss with config.yaml left behind, or in a full inflate."""
    path, extra, expected = make_case(case, tmp_path)
    run_dir = tmp_path / "run"
    t0 = time.perf_counter()
    r = run_cli(["train.py", *G, f"dataset.path={path}", *extra, f"hydra.run.dir={run_dir}", "logger=none"])
    assert r.returncode == 1 and time.perf_counter() - t0 < 120
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {expected}"), r.stderr
    assert hydra_only(run_dir)


@pytest.mark.slow
def test_cli_huge_label_trains_with_a_short_renumbering_warning(tmp_path):
    """Labels {0, 5, 10⁹}: renumbered 0..2 without an array of 10⁹ entries; G trains and tests."""
    path = write(tmp_path / "big.npz", *good(n_per_class=34, labels=(0, 5, 10**9)))
    run_dir = tmp_path / "run"
    r = run_cli(["train.py", *G, f"dataset.path={path}", f"hydra.run.dir={run_dir}", "logger=none"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert (run_dir / "metrics.json").is_file() and (run_dir / "predictions.npz").is_file()
    log = (run_dir / "train.log").read_text()
    assert (
        "labels [1, 2, 3, 4, 6, ...] (999999998 in all) never occur (labels span 0..1000000000); "
        "the 3 classes present are renumbered 0..2" in log
    )
    probs = np.load(run_dir / "predictions.npz")["test/probs"]
    assert probs.shape[1] == 3
