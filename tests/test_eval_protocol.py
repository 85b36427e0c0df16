"""The evaluation protocol as one object (mnp.eval.eval_protocol): the ``eval:`` node of conf/train.yaml, built once
from the run config, handed whole to the model and read there; a checkpoint of a run saved before some of its
keys existed evaluates with their defaults."""

import dataclasses

import pytest
import torch
from cfg_utils import compose_train
from test_checkpointing import eval_cfg

from mnp.cli.builders import build_datamodule, build_model
from mnp.cli.pipeline import evaluate, train
from mnp.cli.validate import ConfigError, check_eval
from mnp.eval.eval_protocol import EvalProtocol
from mnp.eval.protocols import default_noise_levels
from mnp.runs.checkpointing import CFG_KEY


def test_the_train_yaml_eval_node_is_the_protocol_with_its_defaults(tmp_path):
    cfg = compose_train(tmp_path)
    assert list(cfg.eval) == EvalProtocol.keys()  # the same keys in the same order
    assert EvalProtocol.from_config(cfg.eval) == EvalProtocol()
    assert EvalProtocol().noise_levels == tuple(default_noise_levels())  # null: σ ∈ logspace(-2, 1, 10)


def test_the_model_gets_the_config_protocol_whole(tmp_path):
    cfg = compose_train(
        tmp_path,
        [
            "model=mlp",
            "dataset.num_views=3",
            "eval.noise_levels=[0.5,2]",
            "eval.noise_subset_size=2",
            "eval.n_bins=7",
            "eval.split=val",
            "dataset.val_fraction=0.2",
            "seed=3",
        ],
    )
    _, dm = build_datamodule(cfg)
    _, model = build_model(cfg, dm)
    assert model.protocol == EvalProtocol(
        noise_levels=(0.5, 2), noise_subset_size=2, n_bins=7, split="val", sample_seed=3
    )
    assert dm.eval_split == "val"
    assert model.noise_subsets == [(0, 1), (0, 2), (1, 2)]  # every pair of the 3 views
    assert model.missing_sets == [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2)]  # each view, then each noise subset
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.protocol.n_bins = 5


def test_subsets_and_removals_follow_the_switches():
    assert EvalProtocol(noise=False).subsets(4) == [] and EvalProtocol(noise=False).removals(4) == [
        (0,),
        (1,),
        (2,),
        (3,),
    ]
    assert EvalProtocol(missing=False).removals(4) == []
    drawn = EvalProtocol(noise_max_subsets=3, noise_seed=1).subsets(6)  # 3 of the C(6, 3) = 20, drawn from the seed
    assert len(set(drawn)) == 3 and drawn == sorted(drawn) and drawn != EvalProtocol(noise_max_subsets=3).subsets(6)


@pytest.mark.parametrize(
    "node,line",
    [
        (
            [0.5],
            "eval must be a mapping of evaluation keys (noise, noise_levels, noise_subset_size, noise_max_subsets, "
            "noise_seed, n_bins, noise_batch_rows, missing, split, per_view, calibration, conformal, conformal_alpha, "
            "raps_lambda, raps_k_reg), got [0.5]",
        ),
        (
            {"sample_seed": 1},
            "eval.sample_seed is not an evaluation key; valid keys: noise, noise_levels, "
            "noise_subset_size, noise_max_subsets, noise_seed, n_bins, noise_batch_rows, missing, split, "
            "per_view, calibration, conformal, conformal_alpha, raps_lambda, raps_k_reg",
        ),
        (
            {"noise_levels": [0.1, float("inf")]},
            "eval.noise_levels must be null or a non-empty list of finite numbers >= 0, got [0.1, inf]",
        ),
        ({"noise_seed": -1}, "eval.noise_seed must be an integer in [0, 4294967295], got -1"),
        ({"split": "train"}, "eval.split must be one of test, val, got 'train'"),
    ],
)
def test_a_bad_node_is_one_line_naming_its_key(node, line):
    with pytest.raises(ValueError) as direct:
        EvalProtocol.from_config(node)
    with pytest.raises(ConfigError) as validated:
        check_eval(node)
    assert str(direct.value) == str(validated.value) == line


@pytest.mark.slow
def test_a_run_saved_before_the_newer_eval_keys_evaluates_with_their_defaults(tmp_path):
    """A checkpoint whose stored ``eval`` holds only the keys of the first protocol (no noise_max_subsets,
    noise_batch_rows, missing, split, per_view nor calibration) evaluates as one that holds their defaults, and
    both give the training run's own test metrics."""
    trained = train(
        compose_train(
            tmp_path / "run",
            [
                "model=mlp",
                "trainer.max_epochs=1",
                "dataset.num_views=3",
                "dataset.n_train=150",
                "dataset.n_test=60",
                "eval.noise_levels=[1.0]",
                "skip_if_done=false",
            ],
        )
    )
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    ckpt[CFG_KEY]["eval"] = {
        k: ckpt[CFG_KEY]["eval"][k] for k in ("noise", "noise_levels", "noise_subset_size", "noise_seed", "n_bins")
    }
    (tmp_path / "old" / "checkpoints").mkdir(parents=True)
    torch.save(ckpt, tmp_path / "old" / "checkpoints" / "last.ckpt")
    new = evaluate(eval_cfg(tmp_path / "run" / "checkpoints" / "last.ckpt", tmp_path / "new_eval"))
    old = evaluate(eval_cfg(tmp_path / "old" / "checkpoints" / "last.ckpt", tmp_path / "old_eval"))
    measured = lambda res: {k: v for k, v in res.items() if k.split("/")[0] in ("test", "noise", "missing", "view")}  # noqa: E731
    assert "missing/acc@v0" in measured(old) and "noise/acc@1" in measured(old)
    assert measured(old) == measured(new) == measured(trained)
