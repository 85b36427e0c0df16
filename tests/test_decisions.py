"""Every default decided under the selection protocol is the one conf/ composes: each decision record
(results/decisions/<model>_<dataset>.csv, mnp.tools.select) names its chosen setting, and the composed config
of that model and dataset holds it."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from cfg_utils import CONF, ROOT

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
        cfg = OmegaConf.to_container(
            compose("train", overrides=[f"model={model}", f"dataset={dataset}", f"paths.output_dir={tmp_path}"]),
            resolve=True,
        )
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
    from mnp.tools.docgen_decisions import render_decisions_open

    assert render_decisions_open({"decisions_open": []}).startswith("None: every default")
    row = dict(model="mnp", dataset="scene15", decision="x", today="1", chosen_before_on="test", what_it_needs="runs")
    table = render_decisions_open({"decisions_open": [row]}).splitlines()
    assert len(table) == 3 and table[2] == "| MNP | Scene15 | x | 1 | test | runs |"
