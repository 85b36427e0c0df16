"""Bad input to ``evaluate.py`` end to end: a checkpoint and data with other views, and ``+eval.*`` overrides
checked by train.py's validation before the checkpoint is read; each ends with one line ``error: ...``, exit
status 1 and no outputs, through the CLI's guard in-process and once as the real ``evaluate.py`` (bad input to
``train.py``: tests/test_bad_input_cli.py)."""

import json
import re
import shutil

import numpy as np
import pytest
from cfg_utils import compose_train
from cli_utils import assert_no_outputs, guarded_error, run_cli
from omegaconf import OmegaConf
from test_bad_input_cli import FAST, npz, tiny

from mnp.cli.pipeline import evaluate, train
from mnp.cli.validate import ConfigError, validate

pytestmark = pytest.mark.usefixtures("no_full_error")


# ---------------------------------------------------------------------------- checkpoint vs data
def test_checkpoint_and_data_with_other_views_fail_in_evaluate(tmp_path, capsys):
    views, y = tiny()
    (tmp_path / "a").mkdir()
    npz(tmp_path / "a" / "data.npz", views, y)
    run = tmp_path / "run"
    train(compose_train(run, ["model=mlp", *FAST, "dataset=custom", f"dataset.path={tmp_path / 'a' / 'data.npz'}"]))
    ckpt = run / "checkpoints" / "last.ckpt"

    def ev_cfg(data_dir, out):
        return OmegaConf.create(
            {
                "ckpt_path": str(ckpt),
                "output_dir": str(out),
                "data_dir": str(data_dir),
                "eval": None,
                "trainer": {"accelerator": "cpu", "devices": 1},
            }
        )

    other_dims, other_count = tmp_path / "dims", tmp_path / "count"
    for folder, vs in (
        (other_dims, [views[0], np.hstack([views[1], views[1][:, :1]])]),
        (other_count, [*views, views[1]]),
    ):
        folder.mkdir()
        npz(folder / "data.npz", vs, y)
    line = guarded_error(evaluate, ev_cfg(other_dims, tmp_path / "ev1"), capsys)
    assert line == (
        f"error: checkpoint {ckpt} was trained on view dims [5, 3] and 3 classes, but the data has [5, 4] and 3"
    )
    line = guarded_error(evaluate, ev_cfg(other_count, tmp_path / "ev2"), capsys)
    assert "view dims [5, 3]" in line and "the data has [5, 3, 3]" in line
    assert_no_outputs(tmp_path / "ev1")
    assert_no_outputs(tmp_path / "ev2")
    # the same data in another folder evaluates (data_dir moves a custom dataset's file)
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "a", moved)
    trained = json.loads((run / "metrics.json").read_text())
    assert evaluate(ev_cfg(moved, tmp_path / "ev3"))["test/acc"] == trained["test/acc"]  # the same data, the same model


@pytest.mark.parametrize(
    "override,expected",
    [
        ({"noise_levels": [-1]}, "eval.noise_levels must be null or a non-empty list of finite numbers >= 0, got [-1]"),
        ({"noise_levels": []}, "eval.noise_levels must be null or a non-empty list of finite numbers >= 0, got []"),
        ({"n_bins": 0}, "eval.n_bins must be an integer >= 1, got 0"),
        ({"noise": "maybe"}, "eval.noise must be true or false, got 'maybe'"),
        (
            {"bogus": 1},
            "eval.bogus is not an evaluation key; valid keys: noise, noise_levels, noise_subset_size, "
            "noise_max_subsets, noise_seed, n_bins, noise_batch_rows, missing, split, per_view, calibration, "
            "conformal, conformal_alpha, raps_lambda, raps_k_reg",
        ),
    ],
)
def test_evaluate_checks_its_eval_overrides_as_train_does_before_loading(tmp_path, capsys, override, expected):
    """evaluate.py's +eval.* overrides are checked by train.py's one validation, before the checkpoint is read
    (it need not exist) or anything is written; they used to give metrics.json with noise/acc@-1 or acc_mean:
    null, or fail after the whole test pass."""
    cfg = OmegaConf.create(
        {
            "ckpt_path": str(tmp_path / "absent.ckpt"),
            "output_dir": str(tmp_path / "ev"),
            "data_dir": None,
            "eval": override,
            "trainer": {"accelerator": "cpu", "devices": 1},
        }
    )
    assert guarded_error(evaluate, cfg, capsys) == f"error: {expected}"
    assert not (tmp_path / "ev").exists()
    with pytest.raises(ConfigError, match=re.escape(expected)):  # the same words from train.py's validation
        validate(
            compose_train(
                tmp_path / "run", ["model=mlp", *(f"++eval.{k}={v}".replace("'", "") for k, v in override.items())]
            )
        )


@pytest.mark.slow
def test_evaluate_cli_refuses_a_bad_eval_override_in_one_line(tmp_path):
    run = tmp_path / "run"
    train(
        compose_train(run, ["model=mlp", *FAST, "dataset=custom", f"dataset.path={npz(tmp_path / 'd.npz', *tiny())}"])
    )
    r = run_cli(["evaluate.py", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "+eval.n_bins=0"])
    assert r.returncode == 1 and r.stderr.startswith("error: eval.n_bins must be an integer >= 1, got 0 (traceback in ")
    assert len(r.stderr.strip().splitlines()) == 1 and not (run / "eval" / "metrics.json").exists()
