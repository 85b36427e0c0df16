"""Round five of the hostile tests, the library (docs/reliability.md, "Round five: the library"): ``mnp.load``
checks a checkpoint's stored preprocessing and weights before it predicts (L31a-L31j), a run that scales each call's
rows on their own never silently ignores them (L44), and wrong views are one line naming the view (L08b-L50)."""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings

import numpy as np
import pytest
import torch
from cfg_utils import compose_train
from test_predictor import digits_file

import mnp
from mnp.cli.pipeline import train
from mnp.runs.checkpointing import PREP_KEY, CheckpointError, load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

TINY_MNP = [
    "model=mnp",
    "model.warmup.epochs=0",
    "model.encoder.d_e=16",
    "model.memory.size=20",
    "dataset.num_views=2",
    "dataset.n_train=100",
    "dataset.n_test=40",
    "trainer.max_epochs=1",
    "eval.noise=false",
    "eval.missing=false",
    "test=false",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Raw digits rows (two 32-column views) and three runs: MLPs on digits scaled on the training rows ("plain")
    and on the test rows' own statistics ("sts", as every mnp_official config), and a tiny MNP on two moons."""
    root = tmp_path_factory.mktemp("r5lib")
    x, _, _ = digits_file(root / "digits.npz")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    digits = ["model=mlp", "dataset=custom", f"dataset.path={root / 'digits.npz'}", "dataset.scaling=standard"]
    for name, overrides in (
        ("plain", digits),
        ("sts", [*digits, "dataset.scale_test_separately=true"]),
    ):
        train(
            compose_train(root / name, [*overrides, "trainer.max_epochs=2", "eval.noise=false", "eval.missing=false"])
        )
    train(compose_train(root / "mnp", TINY_MNP))
    torch.set_num_threads(n)
    return root, [x[:, :32], x[:, 32:]]


def crafted(run, tmp_path, edit) -> str:
    """A copy of the run's checkpoint with ``edit`` applied to it, as a user or a damaged disk could leave it."""
    ckpt = load_checkpoint(run / "checkpoints" / "last.ckpt")
    edit(ckpt)
    path = tmp_path / "crafted.ckpt"
    torch.save(ckpt, path)
    return str(path)


def prep(edit):
    return lambda ckpt: edit(ckpt[PREP_KEY])


@pytest.mark.slow
@pytest.mark.parametrize(
    "edit, says",
    [
        # L31a: the NaN shift scaled view x1 to NaN, taken as a missing view: finite output, no warning
        (prep(lambda p: p["shift"][0].__setitem__(3, float("nan"))), "the shift of view x1 is nan in column 3"),
        # L31b: blamed the user's row ("views[0] row 0 holds -inf")
        (prep(lambda p: p["scale"][0].__setitem__(5, 0.0)), "the scale of view x1 is 0.0 in column 5 .a scale must"),
        # L31c: silently predicted on sign-flipped features
        (prep(lambda p: p["scale"].__setitem__(1, -p["scale"][1])), r"the scale of view x2 is -[0-9.e+-]+ in column 0"),
        # L31d: "the run was trained on rows of 3 columns", false
        (
            prep(lambda p: p["shift"].__setitem__(0, p["shift"][0][:3])),
            r"the shift of view x1 has shape \(3,\), but the model's view x1 has 32 columns",
        ),
        # L31e: an IndexError at predict
        (prep(lambda p: p.__setitem__("labels", p["labels"][:1])), r"its labels have shape \(1,\), but the model"),
        # L31h: "this run was trained on 3 (x1, x2, x3)", false
        (prep(lambda p: p["shift"].append(p["shift"][1])), "its shift holds 3 views, but the model has 2 views"),
        (prep(lambda p: p.pop("labels")), "it has no 'labels'"),
        (prep(lambda p: p.__setitem__("scaling", "bogus")), "its scaling is 'bogus', not one of minmax"),
        (prep(lambda p: p.__setitem__("eval_batch_size", 0)), "its eval_batch_size is 0, not an integer >= 1"),
        (prep(lambda p: p.__setitem__("scale_test_separately", "yes")), "its scale_test_separately is 'yes'"),
    ],
)
def test_a_checkpoints_stored_preprocessing_is_checked_at_load(runs, tmp_path, edit, says):
    path = crafted(runs[0] / "plain", tmp_path, edit)
    with pytest.raises(CheckpointError, match=f"^checkpoint {path}: its stored preprocessing is inconsistent: {says}"):
        mnp.load(path)


def nan_weight(ckpt):
    key = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point() and v.dim() == 2)
    ckpt["state_dict"][key] = torch.full_like(ckpt["state_dict"][key], float("nan"))


@pytest.mark.slow
@pytest.mark.parametrize("run", ["mnp", "plain"])  # MNP: sparsemax's raw RuntimeError (L31j); MLP: NaN rows
def test_a_checkpoint_with_nan_weights_is_refused_at_load_in_one_line(runs, tmp_path, run):
    path = crafted(runs[0] / run, tmp_path, nan_weight)
    with pytest.raises(CheckpointError, match=f"^checkpoint {path}: its weight [a-z0-9_.]+ holds [0-9]+ non-finite"):
        mnp.load(path)


@pytest.mark.slow
def test_one_row_at_a_time_of_a_run_scaling_its_rows_on_their_own_is_refused_not_ignored(runs, caplog):
    """L44: every single-row call gave the same probabilities (the row scaled to zeros), whatever the row."""
    p, (x1, x2) = mnp.load(runs[0] / "sts"), runs[1]
    says = "view x1: the {} row.s. given have one value per column, so scaled on their own statistics"
    with pytest.raises(ValueError, match=says.format(1)):
        p.predict_proba([x1[:1], x2[:1]])
    with pytest.raises(ValueError, match=says.format(2)):  # copies of one row
        p.predict_proba([x1[[7, 7]], x2[[7, 7]]])
    with pytest.raises(ValueError, match="scaling must be 'run' .* or 'train'"):
        p.predict_proba([x1[:1], x2[:1]], scaling="own")
    # the way out the message names: the training scalers, row by row as in one call (an MLP is row-independent)
    single = np.concatenate([p.predict_proba([x1[i : i + 1], x2[i : i + 1]], scaling="train") for i in range(20)])
    np.testing.assert_allclose(single, p.predict_proba([x1[:20], x2[:20]], scaling="train"), rtol=1e-5)
    assert len(np.unique(single.round(6), axis=0)) == 20
    # a column constant among the rows given loses its values: said, not silent
    rows = x1.copy()  # every row: only the columns constant in training too are constant here
    rows[:, 10] = 99.0
    with caplog.at_level(logging.WARNING):
        p.predict_proba([rows, x2])
    assert caplog.messages == [
        "view x1: 1 of its 32 columns (the first: 10) have one value in all 1797 rows given, so scaled on their own "
        "statistics (the run's dataset.scale_test_separately) they are 0 and their values are ignored; pass more "
        "rows together, or scaling='train'"
    ]


@pytest.mark.slow
def test_a_missing_row_does_not_erase_a_view_scaled_on_the_rows_given(runs):
    """A missing (all-NaN) row made every statistic of its view NaN, so the view went missing in every row."""
    p, (x1, x2) = mnp.load(runs[0] / "sts"), runs[1]
    gap = np.vstack([x2[:20], np.full((1, 32), np.nan)])
    scaled = p.transform([x1[:21], gap])[1]
    np.testing.assert_array_equal(scaled[:20], p.transform([x1[:20], x2[:20]])[1])  # the 20 rows' own statistics
    assert scaled[20].isnan().all()  # the missing row stays missing


@pytest.mark.slow
def test_a_rows_mnp_probabilities_vary_with_the_other_rows_within_the_monte_carlo_error(runs):
    """L04 (documented in predict_proba): MNP draws its samples per batch, so rows 0-9 alone differ from the same
    rows in a call of 40; not in the same call, and less with more samples (model.decoder.eval_samples): a
    Monte-Carlo error, which no order of the draws removes without changing the run's test pass."""
    p = mnp.load(runs[0] / "mnp")
    rng = np.random.default_rng(0)
    rows = [rng.normal(size=(40, 2)), rng.normal(size=(40, 2))]

    def dependence():
        alone = np.asarray(p.predict_proba([r[:10] for r in rows]))
        np.testing.assert_array_equal(alone, p.predict_proba([r[:10] for r in rows]))
        return np.abs(alone - p.predict_proba(rows)[:10]).mean()

    few = dependence()
    spec = p.model.spec
    p.model.spec = dataclasses.replace(spec, decoder=dataclasses.replace(spec.decoder, eval_samples=200))
    many = dependence()
    assert few > 0.01 and many < few / 5, (few, many)  # S = 5 against 200 (measured: 0.12 against 0.011)


@pytest.mark.slow
@pytest.mark.parametrize(
    "views, says",
    [
        # L08b: numpy's "could not convert string to float" named no view
        (lambda x1, x2: [x1, np.full(x2.shape, "a")], r"^view x2 is not an array of numbers \(could not convert"),
        # L14: the cast to float32 made an infinity, reported as one the user gave ("holds -inf")
        (
            lambda x1, x2: [x1 * 1e300, x2],
            r"^view x1 row 0 holds -?[0-9.]+e\+30[0-9] in column [0-9]+, which scaled .* overflows float32",
        ),
        # L17: a forgotten key was taken as a missing view, silently
        (lambda x1, x2: {"x1": x1}, r"^the views given lack 'x2'; this run's views are x1, x2 \(give 'x2': None"),
        # L24: read as the views 'x' and '1'
        (lambda x1, x2: "x1", r"^views must be a list of arrays, one per view \(x1, x2\), or a dict .*; got a str$"),
    ],
)
def test_views_of_the_wrong_kind_are_one_line_naming_the_view(runs, views, says):
    p, (x1, x2) = mnp.load(runs[0] / "plain"), runs[1]
    with pytest.raises(ValueError, match=says):
        p.predict_proba(views(x1[:20] + 1.0, x2[:20]))
    assert p.predict_proba({"x1": x1[:20], "x2": None}).shape == (20, 10)  # an explicit None stays missing


def test_a_checkpoint_path_that_is_a_broken_symbolic_link_says_so(tmp_path):
    """L50: a loop was "neither a run directory nor a checkpoint file"."""
    loop, dangling, run = tmp_path / "loop.ckpt", tmp_path / "gone.ckpt", tmp_path / "run"
    os.symlink(loop, loop)
    os.symlink(tmp_path / "nothing", dangling)
    (run / "checkpoints").mkdir(parents=True)
    os.symlink(run / "checkpoints" / "last.ckpt", run / "checkpoints" / "last.ckpt")
    with pytest.raises(FileNotFoundError, match=f"^{loop} is a loop of symbolic links; point it at a run directory"):
        mnp.load(loop)
    with pytest.raises(FileNotFoundError, match=f"^{dangling} is a symbolic link to {tmp_path}/nothing, which does"):
        mnp.load(dangling)
    with pytest.raises(FileNotFoundError, match=f"^{run}/checkpoints/last.ckpt is a loop of symbolic links"):
        mnp.load(run)


@pytest.mark.slow
def test_predict_proba_is_the_array_and_unpacking_the_old_pair_warns(runs):
    p, (x1, x2) = mnp.load(runs[0] / "plain"), runs[1]
    rows = [x1[:2], x2[:2]]  # two rows: the old `probs, unc = ...` would unpack without an error
    probs = p.predict_proba(rows)
    assert probs.shape == (2, 10) and np.allclose(probs.sum(1), 1, atol=1e-5)
    with pytest.warns(FutureWarning, match="return_uncertainty=True"):
        first, second = probs
    pair = p.predict_proba(rows, return_uncertainty=True)
    assert np.array_equal(pair[0], probs) and pair[1].shape == (2,)
    assert np.array_equal(p.predict_uncertainty(rows), pair[1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(probs.argmax(1))) == 2  # what numpy derives from it iterates quietly
