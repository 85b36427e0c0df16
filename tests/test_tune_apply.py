"""mnp.tune.apply --inference: MNP's inference-only settings, chosen on the winner's checkpoints after the study,
join its generated config; a record of another pair or of a setting that needs training is refused."""

from __future__ import annotations

import csv

import pytest
import yaml
from omegaconf import OmegaConf
from test_tuning import by_lr, fake_launch, make_study

from mnp.tune.apply import apply, main

FIELDS = ["model", "dataset", "decision", "candidate", "setting", "chosen"]


def record(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(dict(zip(FIELDS, r)) for r in rows)
    return path


WEIGHTING = "model.aggregation.view_weighting.mode=distance,model.aggregation.view_weighting.quantile=0.99"


def test_the_chosen_inference_settings_join_the_winners_config(tmp_path):
    study = make_study(tmp_path, n_trials=2)
    study.run(fake_launch(by_lr, []))
    decisions = record(tmp_path / "mlp_toy_tuned.csv", [
        ("mlp", "toy", "view_weighting", "default", "model.aggregation.view_weighting.mode=none", "False"),
        ("mlp", "toy", "view_weighting", "q=0.99", WEIGHTING, "True"),
        ("mlp", "toy", "eval_samples", "eval_samples=20", "model.decoder.eval_samples=20", "True"),
    ])  # fmt: skip
    _, cfg_path = apply(study.sweep_dir, tmp_path / "results", tmp_path / "conf", decisions)
    cfg = OmegaConf.create(yaml.safe_load(cfg_path.read_text()))
    best = yaml.safe_load((study.sweep_dir / "best.yaml").read_text())
    assert cfg.model.optim.lr == pytest.approx(float(dict(o.split("=") for o in best["overrides"])["model.optim.lr"]))
    assert (
        cfg.model.aggregation.view_weighting.mode == "distance"
        and cfg.model.aggregation.view_weighting.quantile == 0.99
    )
    assert cfg.model.decoder.eval_samples == 20 and cfg.tuned_from.endswith(f"; inference: {decisions.as_posix()}")


@pytest.mark.parametrize(
    "rows, message",
    [
        ([("mlp", "toy", "memory_size", "m", "model.memory.size=300", "True")], "is not an inference-only setting"),
        ([("mnp", "cub", "eval_samples", "s", "model.decoder.eval_samples=20", "True")], "not the study's mlp on toy"),
        ([("mlp", "toy", "eval_samples", "s", "model.decoder.eval_samples=20", "False")], "chose nothing"),
        ([("mlp", "toy", "seed", "s", "seed=3", "True")], "is not a model setting"),
    ],
)
def test_a_record_that_cannot_join_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys, rows, message):
    study = make_study(tmp_path, n_trials=2)
    study.run(fake_launch(by_lr, []))
    decisions = record(tmp_path / "d.csv", rows)
    conf = tmp_path / "conf"
    with pytest.raises(SystemExit):
        main(
            [str(study.sweep_dir), "--results", str(tmp_path / "r"), "--conf", str(conf), "--inference", str(decisions)]
        )
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not conf.exists() and not (tmp_path / "r").exists()
