"""Round five of the hostile tests, the library (docs/reliability.md, "Round five: the library"): a checkpoint's
stored preprocessing is checked before it is used (L31a-e, L31h), and a run that scales each call's rows on their own
never silently ignores its input (L44)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

import mnp
from cfg_utils import compose_train
from mnp.core.checkpointing import PREP_KEY, load_checkpoint
from mnp.core.pipeline import train


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two 2-epoch MLP runs on digits (two 32-column views): scaled on the training rows, and on the test rows' own
    statistics (dataset.scale_test_separately=true, as every mnp_official config)."""
    root = tmp_path_factory.mktemp("r5lib")
    x, y = load_digits(return_X_y=True)
    np.savez(root / "digits.npz", x1=x[:, :32], x2=x[:, 32:], y=y)
    out = {}
    for name, extra in (("plain", []), ("sts", ["dataset.scale_test_separately=true"])):
        torch.set_num_threads(1)
        run = root / name
        overrides = ["model=mlp", "dataset=custom", f"dataset.path={root / 'digits.npz'}", "trainer.max_epochs=2"]
        train(compose_train(run, [*overrides, "eval.noise=false", "eval.missing=false", *extra]))
        out[name] = run
    return out, x


def crafted(run, tmp_path, edit) -> str:
    ckpt = load_checkpoint(run / "checkpoints" / "last.ckpt")
    edit(ckpt[PREP_KEY])
    path = tmp_path / "crafted.ckpt"
    torch.save(ckpt, path)
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "case, edit, message",
    [
        (
            "L31a",
            lambda p: p["shift"][0].__setitem__(3, float("nan")),
            "view x1's scaler holds a value that is not finite",
        ),
        ("L31b", lambda p: p["scale"][0].__setitem__(0, 0.0), "view x1's scale holds 0: a scale must be > 0"),
        (
            "L31c",
            lambda p: p["scale"].__setitem__(0, -p["scale"][0]),
            "view x1.s scale holds -[0-9.]+: a scale must be > 0",
        ),
        ("L31d", lambda p: p["shift"].__setitem__(0, p["shift"][0][:3]), r"view x1's scaler has shapes \(3,\)"),
        ("L31e", lambda p: p.__setitem__("labels", p["labels"][:1]), "1 class labels for a model of 10 classes"),
        ("L31h", lambda p: p["shift"].append(p["shift"][0]), "3 shifts and 2 scales for a model of 2 views"),
    ],
)
def test_a_checkpoints_stored_preprocessing_is_checked_at_load(runs, tmp_path, case, edit, message):
    (by_name, _) = runs
    path = crafted(by_name["plain"], tmp_path, edit)
    with pytest.raises(ValueError, match=f"crafted.ckpt: its stored preprocessing is inconsistent: {message}"):
        mnp.load(path)


@pytest.mark.slow
def test_one_row_at_a_time_of_a_run_scaling_its_test_rows_on_their_own_is_refused_not_ignored(runs):
    (by_name, x) = runs
    p = mnp.load(by_name["sts"])
    rows = [x[:20, :32], x[:20, 32:]]
    together = p.predict_proba(rows)
    assert together.shape == (20, 10)
    with pytest.raises(ValueError, match="view x1's one row would scale to zeros: the prediction would ignore"):
        p.predict_proba([x[:1, :32], x[:1, 32:]])
    with pytest.raises(ValueError, match="view x1's 2 rows are all equal and would scale to zeros"):
        p.predict_proba([x[[0, 0], :32], x[[0, 0], 32:]])
    p.own_scaling = False  # the way out the message names: the run's training scalers
    single = np.concatenate([p.predict_proba([x[i : i + 1, :32], x[i : i + 1, 32:]]) for i in range(20)])
    assert len({tuple(r.round(6)) for r in single}) > 5  # the input matters again


@pytest.mark.slow
def test_predict_proba_is_the_array_and_unpacking_the_old_pair_warns(runs):
    (by_name, x) = runs
    p = mnp.load(by_name["plain"])
    rows = [x[:2, :32], x[:2, 32:]]  # two rows: the old `probs, unc = ...` would unpack without an error
    probs = p.predict_proba(rows)
    assert probs.shape == (2, 10) and np.allclose(probs.sum(1), 1, atol=1e-5)
    with pytest.warns(FutureWarning, match="return_uncertainty=True"):
        first, second = probs
    pair = p.predict_proba(rows, return_uncertainty=True)
    assert np.array_equal(pair[0], probs) and pair[1].shape == (2,)
    assert np.array_equal(p.predict_uncertainty(rows), pair[1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(probs.argmax(1))) == len(list(probs[0])) // 5  # what numpy derives iterates quietly
