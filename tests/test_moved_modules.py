"""Stored configs written before the rooms of issue 45 (``mnp.core.*``, MNP's loose modules) name old module paths
in their ``_target_`` keys: they are read as today's, and every old path maps to a module that exists."""

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mnp.runs.migrations import MOVED_MODULES, modern_target, upgrade_run_config
from mnp.runs.rundir import EvalOutputConflict, check_eval_output, stored_config

ROOT = Path(__file__).resolve().parents[1]


def test_every_old_module_path_maps_to_a_module_that_exists():
    assert len(MOVED_MODULES) == 59
    assert [new for new in MOVED_MODULES.values() if not (ROOT / f"{new.replace('.', '/')}.py").is_file()] == []
    assert modern_target("mnp.core.wandb_utils.RunLogger") == "mnp.cli.wandb_utils.RunLogger"
    assert modern_target("mnp.model_training.MNPTraining") == "mnp.model.training.MNPTraining"
    assert modern_target("mnp.model.MNP") == "mnp.model.MNP"
    assert modern_target("pytorch_lightning.loggers.CSVLogger") == "pytorch_lightning.loggers.CSVLogger"


def old_config() -> dict:
    return {
        "model": {"_target_": "baselines.mlp.MLP", "hidden": [8]},
        "logger": {"wandb": {"_target_": "mnp.core.wandb_utils.RunLogger", "offline": True}},
        "callbacks": {"extra": [{"_target_": "mnp.core.callbacks.Nothing"}]},
        "seed": 0,
    }


def test_a_stored_config_naming_old_paths_reads_as_todays(tmp_path):
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(old_config()))
    got = stored_config(tmp_path)
    assert got["logger"]["wandb"] == {"_target_": "mnp.cli.wandb_utils.RunLogger", "offline": True}
    assert got["callbacks"]["extra"] == [{"_target_": "mnp.cli.callbacks.Nothing"}]
    assert upgrade_run_config(old_config())["model"] == old_config()["model"]


def test_an_evaluation_stored_with_old_paths_is_the_same_evaluation(tmp_path):
    ckpt = tmp_path / "last.ckpt"
    out = tmp_path / "eval"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps({"checkpoint": str(ckpt)}))
    (out / "config.yaml").write_text(OmegaConf.to_yaml(old_config()))
    check_eval_output(out, ckpt, upgrade_run_config(old_config()))  # no conflict: the same evaluation
    other = {**upgrade_run_config(old_config()), "seed": 1}
    with pytest.raises(EvalOutputConflict, match=r"holds another evaluation \(differs at seed\)"):
        check_eval_output(out, ckpt, other)
