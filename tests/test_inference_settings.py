"""Inference-only MNP settings on a trained checkpoint (mnp.model.inference_settings): evaluate.py's +model.*
re-scores a run under them into its own folder and records them in its config; other model keys are refused."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from cfg_utils import compose_train
from omegaconf import OmegaConf

from mnp.cli.pipeline import evaluate, train
from mnp.model.inference_settings import inference_settings


def _evaluate(ckpt, model=None, output_dir=None):
    return evaluate(
        OmegaConf.create(
            {
                "ckpt_path": str(ckpt),
                "output_dir": output_dir,
                "data_dir": None,
                "eval": {"missing": False, "per_view": False},
                "model": model,
                "trainer": {"accelerator": "cpu", "devices": 1},
            }
        )
    )


@pytest.fixture(scope="module")
def mnp_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("mnp_run")
    overrides = ["model=mnp", "trainer.max_epochs=2", "dataset.num_views=2", "model.decoder.num_samples=2"]
    train(compose_train(root, overrides))
    return root


def test_evaluate_applies_the_decoders_prediction_samples_and_records_them(mnp_run, one_thread):
    ckpt = mnp_run / "checkpoints" / "last.ckpt"
    plain = _evaluate(ckpt)
    more = _evaluate(ckpt, {"decoder": {"eval_samples": 12}})
    out = mnp_run / "eval_missing=False,per_view=False,model.decoder.eval_samples=12"
    assert (out / "metrics.json").is_file() and (mnp_run / "eval_missing=False,per_view=False").is_dir()
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["model"]["decoder"] == {**saved["model"]["decoder"], "eval_samples": 12, "num_samples": 2}
    assert json.loads((out / "metrics.json").read_text())["test/nll"] == more["test/nll"] != plain["test/nll"]
    again = _evaluate(ckpt, {"decoder": {"eval_samples": 12}})
    assert again["test/nll"] == more["test/nll"]  # its own seeded draws: the same evaluation twice


def test_eq8_prime_on_a_model_trained_without_it_gets_its_reference(mnp_run, one_thread):
    ckpt = mnp_run / "checkpoints" / "last.ckpt"
    plain = _evaluate(ckpt)
    weighted = _evaluate(ckpt, {"aggregation": {"view_weighting": {"mode": "distance", "quantile": 0.5}}})
    assert math.isfinite(weighted["noise/ece_mean"]) and weighted["noise/ece_mean"] != plain["noise/ece_mean"]
    assert weighted["test/acc"] == pytest.approx(plain["test/acc"], abs=0.05)  # clean rows sit near the context


def test_a_setting_that_needs_training_is_refused_in_one_line(mnp_run):
    with pytest.raises(ValueError, match=r"model.memory.size is not an inference-only setting") as e:
        _evaluate(mnp_run / "checkpoints" / "last.ckpt", {"memory": {"size": 5}})
    assert "\n" not in str(e.value) and "model.decoder.eval_samples" in str(e.value)
    with pytest.raises(ValueError, match="eval_samples"):  # the part's own domain check
        inference_settings({"decoder": {"eval_samples": 0}}) and _evaluate(
            mnp_run / "checkpoints" / "last.ckpt", {"decoder": {"eval_samples": 0}}
        )
    assert inference_settings(OmegaConf.create({"aggregation": {"view_weighting": {"power": 2.0}}})) == {
        "aggregation.view_weighting": {"power": 2.0}
    }


def test_a_model_without_mnps_parts_refuses_them(tmp_path, one_thread):
    train(compose_train(tmp_path, ["model=mlp", "trainer.max_epochs=1"]))
    with pytest.raises(ValueError, match="MNP's; this checkpoint holds a"):
        _evaluate(tmp_path / "checkpoints" / "last.ckpt", {"decoder": {"eval_samples": 4}})
