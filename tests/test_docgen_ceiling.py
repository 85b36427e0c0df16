"""Issue 31's goal table (mnp.tools.docgen.docgen_ceiling) on synthetic records: met or missed against targets computed
here by hand, and the paired test against scipy's."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from mnp.tools.docgen.docgen_ceiling import ceiling_rows, ece_rows, goal_row

SEEDS = range(5)


def records(values: dict[tuple[str, str], dict[str, list[float]]], experiment: str = "paper_main") -> dict:
    """{(model, dataset): {metric: per-seed values}} -> runs.csv records."""
    out: dict = {}
    for (model, dataset), metrics in values.items():
        for k, xs in metrics.items():
            for s, x in zip(SEEDS, xs):
                out.setdefault((experiment, model, dataset, None, s), {})[k] = x
    return out


def test_a_goal_is_met_at_its_target_and_missed_below_it_by_the_gap():
    ours = {0: 0.80, 1: 0.82, 2: 0.81}
    theirs = {0: 0.79, 1: 0.80, 2: 0.83}
    target = np.mean(list(theirs.values())) - 0.01  # within one point
    _, _, mnp, tgt, status, test = goal_row("cub", "g", "test/acc", ours, "mgp", theirs, target)
    assert (mnp, tgt, status) == ("81.00", "79.67 (MGP)", "**met**")
    p = stats.ttest_rel([0.80, 0.82, 0.81], [0.79, 0.80, 0.83]).pvalue
    assert test == f"MNP − MGP: p = {p:.3f}; Δ +0.33, 3 seeds"
    status = goal_row("cub", "g", "test/acc", ours, "mgp", theirs, 0.8150)[4]
    assert status == "missed by 0.50"  # 81.50 − 81.00
    ece = goal_row("pie", "g", "test/ece", {0: 0.05, 1: 0.07}, "sngp", {0: 0.04, 1: 0.04}, 0.04)
    assert ece[2:5] == ["0.060", "0.040 (SNGP)", "missed by 0.020"]  # lower is better


def test_the_t_scaled_goal_accepts_mnp_inside_the_lowest_models_interval_and_names_the_miss_beyond_it():
    sngp = [0.030, 0.040, 0.035, 0.045, 0.050]
    half = stats.t.ppf(0.975, 4) * np.std(sngp, ddof=1) / math.sqrt(5)
    high = np.mean(sngp) + half
    inside = [x + 0.005 for x in sngp]  # above SNGP's mean, below its interval's top
    assert np.mean(sngp) < np.mean(inside) < high
    rec = records({("mnp", "cub"): {"cal/test/ece": inside}, ("sngp", "cub"): {"cal/test/ece": sngp},
                   ("mcd", "cub"): {"cal/test/ece": [0.09] * 5}}, "calibration")  # fmt: skip
    (row,) = ece_rows(rec, "calibration", "cal/test/ece", "g", True)
    assert row[3:5] == [f"{high:.3f} (SNGP)", "**met**"]
    outside = [x + 0.02 for x in sngp]
    rec = records({("mnp", "cub"): {"cal/test/ece": outside}, ("sngp", "cub"): {"cal/test/ece": sngp}}, "calibration")
    (row,) = ece_rows(rec, "calibration", "cal/test/ece", "g", True)
    assert row[4] == f"missed by {np.mean(outside) - high:.3f}"
    (raw,) = ece_rows(rec, "calibration", "cal/test/ece", "g", False)  # raw: the lowest mean itself
    assert raw[3:5] == [f"{np.mean(sngp):.3f} (SNGP)", f"missed by {0.02:.3f}"]


def test_cubs_noisy_goal_averages_each_seed_over_sigma_at_least_2_against_the_ceiling_models_runs():
    high = {f"noise/acc@{s}": [0.78 + 0.01 * i for i in range(5)] for s in ("2.154", "4.642")}
    high["noise/acc@10"] = [0.75] * 5
    rec = records({("mnp", "cub"): {**high, "noise/acc@1": [0.99] * 5},  # σ = 1 is not averaged in
                   ("de_lf", "cub"): {"missing/acc_subsets_mean": [0.80] * 5}})  # fmt: skip
    (row,) = ceiling_rows(rec, {"cub": {"ceiling": {"model": "de_lf"}}})
    per_seed = [(2 * (0.78 + 0.01 * i) + 0.75) / 3 for i in range(5)]
    goal, mnp, target, status = row[1:5]
    assert goal == "accuracy at σ ≥ 2 within 1 point of the ceiling"
    assert (mnp, target) == (f"{100 * np.mean(per_seed):.2f}", "79.00 (DE (LF))")
    assert status == f"missed by {100 * (0.79 - np.mean(per_seed)):.2f}"
