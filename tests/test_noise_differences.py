"""figures/noise_differences.json: each model's noisy accuracy minus MGP's per σ, paired over seeds, recomputed here
from runs.csv with pandas and scipy."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from cfg_utils import ROOT
from scipy import stats

from mnp.tools.figures.noise_figure import differences
from mnp.tools.report.report_records import read_runs

RUNS = ROOT / "results" / "paper_main" / "runs.csv"


def test_the_committed_differences_are_todays_runs_csv():
    committed = json.loads((ROOT / "figures" / "noise_differences.json").read_text())
    assert committed == json.loads(json.dumps(differences(read_runs(RUNS))))


@pytest.mark.parametrize("dataset,model,key", [("cub", "mnp", "noise/acc@2.154"), ("pie", "sngp", "noise/acc@0.01")])
def test_a_difference_is_the_paired_mean_and_t_interval_over_shared_seeds(dataset, model, key):
    runs = pd.read_csv(RUNS, keep_default_na=False, na_values=[""])
    runs = runs[(runs.experiment == "paper_main") & (runs.dataset == dataset) & runs.variant.isna()]
    ours = runs[runs.model == model].set_index("seed")[key]
    mgp = runs[runs.model == "mgp"].set_index("seed")[key]
    d = (100 * (ours - mgp)).dropna()
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / len(d) ** 0.5
    cell = differences(read_runs(RUNS))[dataset][model]
    i = cell["sigma"].index(float(key.split("@")[1]))
    assert cell["diff"][i] == pytest.approx(d.mean(), abs=1e-4) and cell["n"] == len(d)
    assert (cell["low"][i], cell["high"][i]) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-4)
