"""The committed diagnosis figures are current: each one's recorded run config is today's defaults plus the figure's
own overrides (``python -m mnp.tools.diagnose.diagnose_figures`` regenerates them)."""

import copy
import json
from pathlib import Path

import pytest

from mnp.tools.diagnose import diagnose_figures

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "figures").glob("diagnose_*.json"))

pytestmark = pytest.mark.slow  # each check composes today's config with Hydra


def test_every_figure_of_the_command_is_committed_and_no_other():
    assert {p.stem.removeprefix("diagnose_") for p in COMMITTED} == set(diagnose_figures.FIGURES)
    assert all(p.with_suffix(".png").is_file() for p in COMMITTED)


@pytest.mark.parametrize("path", COMMITTED, ids=[p.stem for p in COMMITTED])
def test_each_committed_figure_was_made_at_todays_config(path):
    record = json.loads(path.read_text())
    assert record["figure"] == path.stem.removeprefix("diagnose_")
    assert diagnose_figures.stale(record) is None, (
        f"{path.name} is stale: python -m mnp.tools.diagnose.diagnose_figures"
    )


def test_a_figure_made_at_another_config_is_stale():
    record = json.loads((ROOT / "figures/diagnose_mnp_cub_s0.json").read_text())
    old = copy.deepcopy(record)
    old["config"]["model"]["memory"]["size"] = 200  # an earlier CUB figure's N^m, not today's
    assert diagnose_figures.stale(old) == "run differs from today's config: model.memory.size=200"
