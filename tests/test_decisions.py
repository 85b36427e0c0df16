"""Every default decided under the selection protocol is the one conf/ composes: each decision record
(results/decisions/<model>_<dataset>.csv, mnp.tools.select) names its chosen setting, and the composed config
of that model and dataset holds it."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from cfg_utils import CONF, ROOT
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from mnp.tools.report.report_runs import model_label

RECORDS = sorted(p for p in (ROOT / "results" / "decisions").glob("*.csv") if p.name != "open.csv")


def _chosen(path: Path) -> list[dict]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    decisions = {r["decision"] for r in rows}
    chosen = [r for r in rows if r["chosen"] == "True"]
    assert sorted(r["decision"] for r in chosen) == sorted(decisions), f"{path}: one chosen row per decision"
    return [r for r in chosen if r["status"] == "decided"]


def test_decision_records_exist_for_mnp():
    assert {p.stem for p in RECORDS} >= {"mnp_cub"}


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_conf_holds_every_chosen_setting(path, tmp_path):
    rows = _chosen(path)
    model, dataset = rows[0]["model"], rows[0]["dataset"]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        # the untuned defaults the decisions chose: an applied tuning study (conf/tuned/) supersedes them; a
        # <model>_<dataset>_tuned record chose on the tuned defaults' checkpoints (mnp.tune.apply --inference)
        untuned = [] if path.stem.endswith("_tuned") else ["~tuned"]
        overrides = [f"model={model}", f"dataset={dataset}", f"paths.output_dir={tmp_path}", *untuned]
        cfg = OmegaConf.to_container(compose("train", overrides=overrides), resolve=True)
    for r in rows:
        assert not r["setting"].startswith("model="), (
            f"{path.name}: decision {r['decision']} chose another model's configuration ({r['setting']}); "
            f"conf/model/{model}.yaml does not hold it"
        )
        for part in filter(None, r["setting"].split(",")):  # "": the defaults of the time, no key set
            key, value = part.split("=", 1)
            node = cfg
            for k in key.split("."):
                node = node[k]
            expected = yaml.safe_load(value)
            if isinstance(expected, str):  # PyYAML reads 1e-07 (no dot) as a string
                try:
                    expected = float(expected)
                except ValueError:
                    pass
            assert node == pytest.approx(expected) if isinstance(expected, float) else node == expected, (
                f"{path.name}: decision {r['decision']} chose {key}={value}, conf/ composes {node!r}"
            )


def test_the_open_decisions_render_as_a_table_or_as_none_left():
    from mnp.tools.docgen.docgen_decisions import render_decisions_open

    assert render_decisions_open({"decisions_open": []}).startswith("None: every default")
    row = dict(model="mnp", dataset="scene15", decision="x", today="1", chosen_before_on="test", what_it_needs="runs")
    table = render_decisions_open({"decisions_open": [row]}).splitlines()
    assert len(table) == 3 and table[2] == f"| {model_label('mnp')} | Scene15 | x | 1 | test | runs |"


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_each_choice_follows_its_declared_rule(path):
    """Re-derived from the record alone: the chosen row is the best mean among default and the candidates the rule
    admits (with ``best mean, p < P vs default`` only those better at paired p < P); a tie keeps default."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for decision in {r["decision"] for r in rows}:
        own = [r for r in rows if r["decision"] == decision]
        (rule,) = {r["rule"] for r in own}
        assert rule == "best mean" or rule.startswith("best mean, p < "), rule
        limit = float(rule.split("p < ")[1].split()[0]) if "p < " in rule else None
        admitted = [r for r in own if r["candidate"] == "default" or limit is None or float(r["p_vs_default"]) < limit]
        pick = max if own[0]["goal"] == "max" else min
        best = pick(float(r["score"]) for r in admitted)
        winners = [r["candidate"] for r in admitted if float(r["score"]) == best]
        expected = "default" if "default" in winners else winners[0]
        assert [r["candidate"] for r in own if r["chosen"] == "True"] == [expected], f"{path.name}: {decision}"


def test_a_rule_other_than_the_best_mean_is_shown_beside_the_criterion():
    from mnp.tools.docgen.docgen_decisions import render_decisions

    row = dict(model="mnp", dataset="cub", decision="tau", candidate="x=1", setting="model.loss.tau=1", n="5")
    row |= dict(criterion="val/nll", goal="min", diff_vs_default="-0.01", p_vs_default="0.2", chosen="False")
    row |= dict(status="decided", rule="best mean, p < 0.05 vs default")
    assert "| val/nll (min; p < 0.05 vs default) |" in render_decisions({"decisions": [row]})
    assert "| val/nll (min) |" in render_decisions({"decisions": [row | {"rule": "best mean"}]})
