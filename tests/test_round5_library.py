"""Round five of the hostile tests, the library (docs/reliability.md, "Round five: the library"): ``mnp.load``
checks a checkpoint's stored preprocessing and weights before it predicts (L31a-L31j), a run that scales each call's
rows on their own never silently ignores them (L44), and wrong views are one line naming the view (L08b-L50)."""

from __future__ import annotations


import pytest
import torch
from cfg_utils import compose_train
from test_predictor import digits_file

import mnp
from mnp.core.checkpointing import PREP_KEY, CheckpointError, load_checkpoint
from mnp.core.pipeline import train

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
