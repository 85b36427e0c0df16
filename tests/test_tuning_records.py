"""The tuning study's records (docs/tuning.md): the tuned config holds the winner's values, mnp.tune.apply takes
a finished study and refuses an unfinished one, the authors' model or a record older than the seed check, an
applied study wins over the defaults under paper_tuned, and the docs table of studies reads a study's record
(the study itself: tests/test_tuning.py)."""

from __future__ import annotations

import pytest
import yaml
from cfg_utils import ROOT
from omegaconf import OmegaConf
from test_tuning import by_lr, fake_launch, make_study

from mnp.cli.validate import ConfigError
from mnp.tune.apply import apply
from mnp.tune.records import tuned_config
from mnp.tune.seedcheck import SeedCheck


# ---------------------------------------------------------------------------- records
def test_the_tuned_config_holds_the_winners_values_as_the_config_reads_them():
    text = tuned_config(
        ["model.optim.lr=0.00492", "model.hidden=[512,256]", "model.flag=true", "trainer.max_epochs=50"], "x"
    )
    assert text.startswith("# @package _global_\n")
    cfg = OmegaConf.create(yaml.safe_load(text))
    assert cfg.model.optim.lr == 0.00492 and list(cfg.model.hidden) == [512, 256] and cfg.model.flag is True
    assert cfg.trainer.max_epochs == 50 and isinstance(cfg.trainer.max_epochs, int)


def test_apply_refuses_an_unfinished_study_and_the_authors_model(tmp_path):
    study = make_study(tmp_path, n_trials=2)
    study.run(fake_launch(by_lr, []))
    written = apply(study.sweep_dir, tmp_path / "results", tmp_path / "conf")
    assert [p.name for p in written] == ["mlp_toy.csv", "mlp_toy.yaml"]
    best = yaml.safe_load((study.sweep_dir / "best.yaml").read_text())
    assert f"(trial {best['trial']}, seed check mean {best['mean']:.4g})" in written[1].read_text()
    assert "# budget: 2 finished trials" in written[0].read_text()
    text = (study.sweep_dir / "trials.csv").read_text().replace("# budget: 2 finished", "# budget: 9 finished")
    (study.sweep_dir / "trials.csv").write_text(text)
    with pytest.raises(ValueError, match="2 of 9 trials finished"):
        apply(study.sweep_dir, tmp_path / "results", tmp_path / "conf")
    best = study.sweep_dir / "best.yaml"
    best.write_text(best.read_text().replace("model: mlp", "model: mnp_official"))
    (study.sweep_dir / "trials.csv").write_text(text.replace("# budget: 9 finished", "# budget: 2 finished"))
    with pytest.raises(ValueError, match="stays untuned"):
        apply(study.sweep_dir, tmp_path / "results", tmp_path / "conf")


def test_apply_takes_a_study_whose_check_is_off_and_refuses_a_record_older_than_the_check(tmp_path):
    study = make_study(tmp_path, n_trials=2, seed_check=SeedCheck(candidates=0))
    calls = []
    study.run(fake_launch(by_lr, calls))
    assert len(calls) == 2 * 3 and "# seed_check: off\n" in (study.sweep_dir / "trials.csv").read_text()
    written = apply(study.sweep_dir, tmp_path / "results", tmp_path / "conf")
    best = yaml.safe_load((study.sweep_dir / "best.yaml").read_text())
    assert best["chosen_by"] == "the study (seed check off)" and best["trial"] == best["study_best"]["trial"]
    assert f"(trial {best['trial']}, mean {best['mean']:.4g})" in written[1].read_text()
    old = {k: v for k, v in best.items() if k not in ("seed_check", "chosen_by", "seed_check_runs_to_go")}
    (study.sweep_dir / "best.yaml").write_text(yaml.safe_dump(old))
    with pytest.raises(
        ValueError, match=r": its seed check is not finished \(its record is older than the seed check\)"
    ):
        apply(study.sweep_dir, tmp_path / "results", tmp_path / "conf")


def test_an_applied_study_wins_over_the_defaults_and_paper_tuned_refuses_a_pair_without_one(tmp_path):
    from cfg_utils import compose_train

    from mnp.cli.validate import validate

    applied = sorted((ROOT / "conf" / "tuned").glob("*.yaml"))
    assert applied, "no study is applied (conf/tuned/ is empty)"
    for path in applied:
        tuned = yaml.safe_load(path.read_text())
        model, dataset = path.stem.rsplit("_", 1)
        cfg = compose_train(tmp_path, ["experiment=paper_tuned", f"model={model}", f"dataset={dataset}"])
        assert cfg.tuned_from == tuned["tuned_from"] and cfg.tuned_from.startswith(f"results/tuning/{path.stem}.csv")
        assert (ROOT / cfg.tuned_from.split(" ")[0]).is_file()  # its record is committed
        for key, value in tuned.get("model", {}).items():
            if not isinstance(value, dict):
                assert OmegaConf.to_container(cfg.model)[key] == value, (path.stem, key)
        assert cfg.trainer.max_epochs == tuned["trainer"]["max_epochs"]
        validate(cfg)  # the experiment accepts it
        untuned = compose_train(tmp_path, ["experiment=paper_main", f"model={model}", f"dataset={dataset}", "~tuned"])
        assert untuned.tuned_from is None
        study = compose_train(tmp_path, ["experiment=tune", f"model={model}", f"dataset={dataset}"])
        assert study.tuned_from is None and study.trainer.max_epochs == untuned.trainer.max_epochs  # as it began
    with pytest.raises(ConfigError, match=r"conf/tuned/etp_synthetic.yaml does not exist: finish the study"):
        validate(compose_train(tmp_path, ["experiment=paper_tuned", "model=etp", "dataset=synthetic"]))
    with pytest.raises(ConfigError, match="mnp_official is the authors' configuration"):
        validate(compose_train(tmp_path, ["experiment=paper_tuned", "model=mnp_official", "dataset=cub"]))


# ---------------------------------------------------------------------------- the docs table of studies
def test_the_docs_table_of_studies_reads_a_study_record(tmp_path):
    from mnp.tools.docgen.docgen_tuning import render_tuning, study

    s = make_study(tmp_path, n_trials=4)
    s.run(fake_launch(by_lr, []))
    got = study(s.sweep_dir / "trials.csv")
    values = [t.value for t in s.study.trials]
    assert got["budget"] == 4 and got["done"] == 4 and got["default"] == pytest.approx(values[0], rel=1e-5)
    assert got["best"] == pytest.approx(min(values), rel=1e-5) and got["best_trial"] == values.index(min(values))
    best = yaml.safe_load((s.sweep_dir / "best.yaml").read_text())
    assert got["check"] == pytest.approx(best["mean"], rel=1e-5) and got["check_trial"] == best["trial"]
    assert got["settings"] == " ".join(best["overrides"])
    assert f"| MLP on toy | 4 of 4 (0, 0) | {values[0]:.4f} |" in render_tuning({"tuning": {"mlp_toy": got}})
    assert f"| {got['check']:.4f} (trial {best['trial']}) | `{got['settings']}` |" in render_tuning(
        {"tuning": {"mlp_toy": got}}
    )


def test_the_docs_table_reads_a_record_older_than_the_seed_check(tmp_path):
    from mnp.tools.docgen.docgen_tuning import render_tuning, study

    old = tmp_path / "trials.csv"  # as the studies wrote it before the check: no seed, seeds_mean or chosen_by
    old.write_text(
        "# study: etp_cub\n# budget: 3 finished trials; TPE (multivariate, seed 0, 8 start-up trials)\n"
        "trial,state,requeued,settings,folds_done,mean,fold_scores,chosen\n"
        "0,complete,False,model.optim.lr=0.01,2,0.3,0.2 0.4,False\n"
        "1,pruned,False,model.optim.lr=0.02,1,,0.9,False\n"
        "2,complete,False,model.optim.lr=0.005,2,0.25,0.2 0.3,True\n"
    )
    got = study(old)
    assert (got["done"], got["pruned"], got["default"], got["best"], got["best_trial"]) == (3, 1, 0.3, 0.25, 2)
    assert got["check"] is None and got["check_trial"] is None and got["settings"] == "model.optim.lr=0.005"
    assert "| ETP on CUB | 3 of 3 (1, 0) | 0.3000 | 0.2500 (trial 2) | – | `model.optim.lr=0.005` |" in render_tuning(
        {"tuning": {"etp_cub": got}}
    )
