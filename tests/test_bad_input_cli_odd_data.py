"""Data that is odd but usable, end to end (a constant or all-zero view, duplicated samples, a class with fewer
than N_K training samples, labels with a gap): the MLP and MNP train on it with a warning for each and give finite
results (bad input that stops a run: tests/test_bad_input_cli.py)."""

import logging

import numpy as np
import pytest
import torch
from cfg_utils import compose_train
from test_bad_input_cli import SMALL_MNP

from datamodules.custom import CustomDataModule
from mnp.cli.pipeline import train

pytestmark = pytest.mark.usefixtures("no_full_error")


# ---------------------------------------------------------------------------- odd but usable data
def degenerate_data(path):
    """3 views: normal, all zero, constant 7. Class 2 has 5 samples (4 train), labels are {0, 1, 3}
    (label 2 never occurs), and rows 1 and 2 duplicate row 0 in every view."""
    rng = np.random.default_rng(1)
    y = np.array([0] * 16 + [1] * 16 + [3] * 5)
    x1 = rng.normal(size=(len(y), 4)) + 2.0 * y[:, None]
    x2, x3 = np.zeros((len(y), 3)), np.full((len(y), 2), 7.0)
    x1[[1, 2]] = x1[0]
    test = np.array([3, 4, 5, 20, 21, 22, 36])
    train_idx = np.setdiff1d(np.arange(len(y)), test)
    np.savez(path, x1=x1, x2=x2, x3=x3, y=y, train_idx=train_idx, test_idx=test)
    return path


@pytest.mark.parametrize("model", ["mlp", "mnp"])
def test_constant_views_duplicates_small_class_and_label_gap_train_with_warnings(tmp_path, caplog, model):
    """Decisions (README): a constant or all-zero view scales to 0 and trains; exact duplicates are kept
    with a warning; a class with fewer than N_K training samples fills its memory block by sampling with
    replacement, with a warning; labels that never occur are dropped and the rest renumbered, with a warning."""
    path = degenerate_data(tmp_path / "odd.npz")
    overrides = [
        "dataset=custom",
        f"dataset.path={path}",
        "dataset.batch_size=8",
        "trainer.max_epochs=2",
        "skip_if_done=false",
        "ckpt_path=null",
        "eval.noise_levels=[1.0]",
    ]
    if model == "mnp":
        overrides += [*SMALL_MNP, "model.memory.size=30"]  # N_K = 10 > the 4 training samples of class 2
    else:
        overrides += ["model=mlp"]
    with caplog.at_level(logging.WARNING):
        res = train(compose_train(tmp_path / "run", overrides))
    text = caplog.text
    said = [r.getMessage() for r in caplog.records if "carries no information" in r.getMessage()]
    assert said == [
        f"{path}: view 2 (3 columns) is all zero: it carries no information, so the model learns "
        "nothing from it; it is kept",
        f"{path}: view 3 (2 columns) is constant (all 37 rows the same): it carries no information, so "
        "the model learns nothing from it; it is kept",
    ]
    assert "2 samples duplicate an earlier sample in every view (0 of the 7 test rows equal a training row)" in text
    assert "labels [2] never occur (labels span 0..3); the 3 classes present are renumbered 0..2" in text
    for key in ("test/acc", "test/nll", "test/ece", "test/brier", "noise/acc_mean"):
        assert np.isfinite(res[key]), key
    probs = np.load(tmp_path / "run" / "predictions.npz")["test/probs"]
    assert np.isfinite(probs).all() and np.allclose(probs.sum(1), 1, atol=1e-5)
    if model == "mnp":
        assert "classes [2] have fewer than N_K=10 training samples; sampled with replacement" in text
        dm = CustomDataModule(str(path), scaling="standard")
        dm.setup()
        state = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
        for m in range(3):
            block = state[f"memory.x{m}"][2]  # (N_K, d): class 2 (label 3 in the file)
            train_rows = dm.train_views[m][dm.train_y == 2]
            assert block.shape[0] == 10 and torch.isfinite(block).all()
            assert all((row == train_rows).all(1).any() for row in block)  # only that class's training rows
        assert torch.equal(dm.train_views[1], torch.zeros_like(dm.train_views[1]))  # all-zero view stays 0
        assert torch.equal(dm.train_views[2], torch.zeros_like(dm.train_views[2]))  # constant view maps to 0
