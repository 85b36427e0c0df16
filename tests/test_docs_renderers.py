"""The docs' renderers (the generated blocks as a whole: tests/test_docs.py): result tables with t intervals and
legacy cells marked, claims and verdicts from paired tests, the noise figure's curves, bands and per-view series
(from the committed results and from a small synthetic file), and the GPU and start-up tables from their
measurement files."""

import pytest
from cfg_utils import ROOT

from mnp.tools.docgen import docgen
from mnp.tools.report.report_runs import model_label

RUNS = {
    ("mnp", "pie"): [(0.95, 0.03, 0.90), (0.96, 0.031, 0.91), (0.9436, 0.029, 0.893)],
    ("mcd", "pie"): [(0.90, 0.05, 0.80), (0.92, 0.06, 0.82), (0.91, 0.052, 0.81)],
    ("mnp_official", "pie"): [(0.96, 0.02, 0.90), (0.94, 0.03, 0.91)],
}


def committed_like(tmp_path):
    """results/paper_main as the report writes it: runs.csv of RUNS, results.csv derived from it, and the legacy
    cells (MGP, and TMC's accuracy) of an older results.csv; returns the renderers' sources."""
    from mnp.tools.report.report import report
    from mnp.tools.report.report_records import claims, read_runs, write_runs
    from mnp.tools.report.report_runs import read_cells

    out = tmp_path / "results" / "paper_main"
    out.mkdir(parents=True)
    keys = ("test/acc", "test/ece", "noise/acc_mean")
    write_runs(
        out / "runs.csv",
        {
            ("paper_main", m, d, None, s): dict(zip(keys, v))
            for (m, d), vals in RUNS.items()
            for s, v in enumerate(vals)
        },
    )
    legacy = [
        ("mgp", "test/acc", 0.9),
        ("mgp", "test/ece", 0.02),
        ("mgp", "noise/acc_mean", 0.91),
        ("tmc", "test/acc", 0.8),
    ]
    (out / "results.csv").write_text(
        "model,dataset,metric,mean,std,n,experiment,variant\n"
        + "".join(f"{m},pie,{k},{v},0.0,5,paper_main,\n" for m, k, v in legacy)
    )
    report([], out, plots=False, from_runs=out / "runs.csv")
    return {
        "paper_main": docgen.read_results(out / "results.csv"),
        "claims": claims(read_runs(out / "runs.csv"), read_cells(out / "results.csv")),
    }


def test_renderers_show_means_with_t_intervals_and_mark_legacy_cells(tmp_path):
    import numpy as np
    from scipy import stats as st

    src = committed_like(tmp_path)
    acc = np.array([v[0] for v in RUNS[("mnp", "pie")]]) * 100
    half = st.t.ppf(0.975, 2) * acc.std(ddof=1) / np.sqrt(3)
    acc_text = f"{acc.mean():.2f} [{acc.mean() - half:.2f}, {acc.mean() + half:.2f}]"
    ece = np.array([v[1] for v in RUNS[("mnp", "pie")]])
    half = st.t.ppf(0.975, 2) * ece.std(ddof=1) / np.sqrt(3)
    ece_text = f"{ece.mean():.3f} [{ece.mean() - half:.3f}, {ece.mean() + half:.3f}]"
    assert acc_text == "95.12 [93.07, 97.17]"
    assert f"| PIE | `mnp` | {acc_text} | {ece_text} | " in docgen.RENDERERS["paper_main"](src)
    legend = "† a legacy aggregate"
    glance = docgen.RENDERERS["glance"](src)
    assert f"| PIE | {acc_text} | {ece_text} | " in glance and legend not in glance
    baselines = docgen.RENDERERS["baselines"](src)
    assert f"| {model_label('mnp')} | – | – | {acc_text} (3) | – |" in baselines  # every cell says its seeds
    assert "| MGP | – | – | 90.00† (5) | – |" in baselines and legend in baselines
    goals = docgen.render_goals(src)
    assert "| PIE | acc % | ≥ 94.5 | 95.12 | 3 | met |" in goals


def test_claims_section_states_each_paired_test(tmp_path):
    from scipy import stats as st

    src = committed_like(tmp_path)
    text = docgen.RENDERERS["claims"](src)
    acc = [[v[0] for v in RUNS[(m, "pie")]] for m in ("mnp", "mcd")]
    p = st.ttest_rel(*acc).pvalue
    assert 0.001 < p < 0.05
    row = next(r for r in text.splitlines() if r.startswith("| PIE | MCD |"))
    assert row.split(" | ")[2] == f"holds (p = {p:.3f}; Δ +{100 * (sum(acc[0]) - sum(acc[1])) / 3:.2f}, 3 seeds)"
    assert row.split(" | ")[3].startswith("holds (p = ")  # ECE: lower is better, and mnp's is lower
    official = next(r for r in text.splitlines() if r.startswith(f"| PIE | {model_label('mnp_official')} |"))
    assert official.split(" | ")[2].startswith("not significant (p = ") and ", 2 seeds)" in official
    assert "| PIE | MGP | untested (Δ +5.12)† | untested (Δ +0.010)† | untested (Δ -0.90)† |" in text
    assert "| PIE | TMC | untested (Δ +15.12)† | – | – |" in text
    assert text.startswith("10 claims: ") and "untested (legacy aggregate) 4" in text
    assert "† a legacy aggregate" in text


def test_verdicts_answer_each_question_by_the_test_against_the_best_baseline(tmp_path):
    """The best baseline by mean is the rival (a legacy cell too); its claim's verdict is the answer."""
    from scipy import stats as st

    text = docgen.RENDERERS["verdicts"](committed_like(tmp_path))
    rows = {r.split(" | ")[1]: r for r in text.splitlines() if r.startswith("| PIE |")}
    acc = [[v[0] for v in RUNS[(m, "pie")]] for m in ("mnp", "mcd")]
    assert rows["the most accurate"].endswith(
        f"| MCD 91.00 [88.52, 93.48] | **yes** (p = {st.ttest_rel(*acc).pvalue:.3f}; Δ +4.12, 3 seeds) |"
    )
    assert rows["the best calibrated (ECE)"].endswith("| MGP 0.020† | untested†: MGP ahead by mean (Δ +0.010) |")
    assert rows["the most robust (noisy accuracy)"].endswith("| MGP 91.00† | untested†: MGP ahead by mean (Δ -0.90) |")
    assert "the best NLL" not in rows and "† a legacy aggregate" in text  # no NLL in these runs


def test_noise_figure_is_the_results_file_and_its_ceiling_is_the_best_removal(tmp_path):
    """figures/noise_curves.json is what the committed results.csv gives; the ceiling is the best model's
    accuracy with the noised subsets removed (missing/acc_subsets_mean), default variants only."""
    import json

    from mnp.tools.figures import noise_figure
    from mnp.tools.report.report_runs import read_results

    committed = json.loads((ROOT / "figures" / "noise_curves.json").read_text())
    assert committed == noise_figure.curves(read_results(ROOT / "results" / "paper_main" / "results.csv"))
    csv = tmp_path / "results.csv"
    rows = [
        "model,dataset,metric,mean,std,n,experiment,variant",
        "mnp,cub,noise/acc@1,0.70,0.01,5,paper_main,",
        "mnp,cub,noise/acc@0.01,0.90,0.02,5,paper_main,",
        "mnp,cub,missing/acc_subsets_mean,0.75,0.0,5,paper_main,",
        "mgp,cub,noise/acc@1,0.80,0.0,3,paper_main,",
        "mgp,cub,missing/acc_subsets_mean,0.81,0.0,3,paper_main,",
        "mnp,cub,missing/acc_subsets_mean,0.99,0.0,5,paper_main,model.loss.tau=1",
    ]
    csv.write_text("\n".join(rows) + "\n")
    data = noise_figure.curves(read_results(csv))
    assert data["cub"]["models"]["mnp"] == {
        "sigma": [0.01, 1.0],
        "acc": [90.0, 70.0],
        "std": [2.0, 1.0],
        "n": 5,
        "band": None,
    }
    assert data["cub"]["ceiling"] == {"acc": 81.0, "model": "mgp", "n": 3}
    table = docgen.render_noise_curves({"noise_curves": data})
    assert (
        f"| CUB | {model_label('mnp')} | 90.0 | 70.0 | 5 |" in table
        and "| CUB | ceiling (MGP, noised views removed) | 81.0 | 81.0 | 3 |" in table
    )


def test_noise_figure_bands_are_the_results_intervals_and_legacy_cells_have_none(tmp_path):
    """Each curve's band is the results.csv 95 % interval of its cells (source=runs); a legacy aggregate has none.
    The committed figure has no legacy cell left (session 17), so the legacy rule is checked on a copy of
    results.csv whose Scene15 MGP noise cells are turned into a legacy aggregate."""
    import csv
    import json

    from mnp.tools.figures.noise_figure import curves
    from mnp.tools.report.report_runs import read_results

    committed = json.loads((ROOT / "figures" / "noise_curves.json").read_text())
    with open(ROOT / "results" / "paper_main" / "results.csv", newline="") as f:
        table = list(csv.DictReader(f))
    cells = {
        (r["model"], r["dataset"], float(r["metric"].split("@")[1])): r
        for r in table
        if r["metric"].startswith("noise/acc@") and not r["variant"] and r["experiment"] == "paper_main"
    }
    kinds = set()
    for d, panel in committed.items():
        for m, c in panel["models"].items():
            rows = [cells[(m, d, s)] for s in c["sigma"]]
            if all(r["source"] == "runs" for r in rows):
                kinds.add("runs")
                assert c["band"]["low"] == pytest.approx([100 * float(r["ci95_low"]) for r in rows], abs=1e-3)
                assert c["band"]["high"] == pytest.approx([100 * float(r["ci95_high"]) for r in rows], abs=1e-3)
                assert all(lo < a < hi for lo, a, hi in zip(c["band"]["low"], c["acc"], c["band"]["high"]))
            else:
                kinds.add("legacy")
                assert c["band"] is None and all(not r["ci95_low"] for r in rows if r["source"] != "runs")
    assert kinds == {"runs"}
    for r in table:
        if (r["model"], r["dataset"]) == ("mgp", "scene15") and r["metric"].startswith("noise/acc@"):
            r.update(source="legacy_aggregate", ci95_low="", ci95_high="")
    legacy_csv = tmp_path / "results.csv"
    with open(legacy_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    panel = curves(read_results(legacy_csv))["scene15"]["models"]
    assert panel["mgp"]["band"] is None
    assert panel["mgp"]["acc"] == committed["scene15"]["models"]["mgp"]["acc"]
    assert all(c["band"] is not None for m, c in panel.items() if m != "mgp")


def test_noise_figure_view_curves_are_the_run_means():
    """The dashed per-view series are the means over runs.csv rows of view/acc@v<k>@<σ> (where MNP logged them)."""
    import csv
    import json

    committed = json.loads((ROOT / "figures" / "noise_curves.json").read_text())
    with open(ROOT / "results" / "paper_main" / "runs.csv", newline="") as f:
        runs = [r for r in csv.DictReader(f) if r["model"] == "mnp" and not r["variant"]]
    checked = 0
    for d, panel in committed.items():
        logged = [r for r in runs if r["dataset"] == d and r.get("view/acc@v0@1")]
        assert bool(panel["views"]) == bool(logged), d
        for k, c in panel["views"].items():
            for s, acc in zip(c["sigma"], c["acc"]):
                col = next(
                    key for key in logged[0] if key.startswith(f"view/acc@v{k}@") and float(key.rsplit("@", 1)[1]) == s
                )
                assert acc == pytest.approx(100 * sum(float(r[col]) for r in logged) / len(logged), abs=1e-3)
                checked += 1
            assert c["n"] == len(logged)
    assert checked >= 10


def synthetic_panel(tmp_path) -> dict:
    """The PIE panel of a results.csv with a runs-sourced MNP (intervals, three views), a legacy MGP."""
    from mnp.tools.figures import noise_figure
    from mnp.tools.report.report_runs import read_results

    csv = tmp_path / "results.csv"
    rows = [
        "model,dataset,metric,mean,std,n,ci95_low,ci95_high,source,experiment,variant",
        "mnp,pie,noise/acc@0.1,0.9,0.01,10,0.89,0.91,runs,paper_main,",
        "mnp,pie,noise/acc@1,0.8,0.02,10,0.78,0.82,runs,paper_main,",
        "mgp,pie,noise/acc@0.1,0.85,0.01,5,,,legacy_aggregate,paper_main,",
        "mgp,pie,noise/acc@1,0.84,0.01,5,,,legacy_aggregate,paper_main,",
        "mnp,pie,view/acc@v10@1,0.1,0.0,10,0.09,0.11,runs,paper_main,",
        "mnp,pie,view/acc@v2@1,0.3,0.0,10,0.29,0.31,runs,paper_main,",
        "mnp,pie,view/acc@v2@0.1,0.7,0.0,10,0.69,0.71,runs,paper_main,",
    ]
    csv.write_text("\n".join(rows) + "\n")
    return noise_figure.curves(read_results(csv))["pie"]


def test_noise_figure_bands_and_views_of_a_synthetic_results_file(tmp_path):
    """A runs-sourced curve gets its interval as band, a legacy one none; view keys become per-view series in
    view order."""
    data = synthetic_panel(tmp_path)
    assert data["models"]["mnp"]["band"] == {"low": [89.0, 78.0], "high": [91.0, 82.0]}
    assert data["models"]["mgp"]["band"] is None
    assert list(data["views"]) == ["2", "10"]
    assert data["views"]["2"] == {"sigma": [0.1, 1.0], "acc": [70.0, 30.0], "n": 10}


@pytest.mark.slow
def test_noise_figure_renders_the_same_bytes_twice(tmp_path):
    """The figure with bands, a legacy curve and per-view curves is written, and is the same PNG twice."""
    from mnp.tools.figures import noise_figure

    data = synthetic_panel(tmp_path)
    a, b = (noise_figure.plot({"pie": data}, tmp_path / f"{x}.png").read_bytes() for x in "ab")
    assert a[:8] == b"\x89PNG\r\n\x1a\n" and a == b


def test_gpu_and_start_up_tables_come_from_the_measurement_files():
    """docs/gpu.md and docs/speed.md render the H200 session's JSON files and benchmarks/startup_cpu.json."""
    from mnp.tools.docgen import docgen_speed

    case = {"extrapolated": False, "test_s": 0.01}
    src = {
        "gpu": {
            "bench_gpu": {
                "meta": {"device": "GPU X"},
                "ratios": {
                    "pie": {
                        "mnp_over_mnp_graph_train": 3.5,
                        "mgp_over_mnp_train": 1.9,
                        "mgp_over_mnp_graph_train": 6.6,
                        "mgp_over_mnp_test": 5.5,
                    }
                },
                "cases": [
                    {**case, "dataset": "pie", "model": m, "train_epoch_s": t}
                    for m, t in (("mnp", 0.08), ("mnp_graph", 0.02), ("mgp", 0.16))
                ],
            },
            "gpu_check": {
                "device": "GPU X",
                "runs": [
                    {
                        "dataset": "pie",
                        "variant": "default",
                        "test/acc": 0.9412,
                        "test/ece": 0.0271,
                        "noise/acc_mean": 0.9199,
                        "time/train_epoch_s": 0.014,
                        "time/total_s": 6.18,
                        "wall_s": 9.5,
                    }
                ],
            },
        },
        "startup": {
            "after": {
                "commit": "abc",
                "cpus": 2,
                "runs": [{}],
                "median": {
                    "wall_s": 10.0,
                    "time/total_s": 7.0,
                    "wall_minus_total_s": 3.0,
                    "time/startup_s": 2.5,
                    "time/teardown_s": 0.01,
                },
            }
        },
    }
    assert (
        "| PIE | 0.080 → 0.020 | 0.160 | 3.50 | 1.90 ✗ | 6.60 ✓ | 0.0100 / 0.0100 | 5.50 ✓ |"
        in docgen_speed.render_gpu_bench(src)
    )
    assert (
        "| PIE, MNP, defaults (`auto`: captured) | 94.12 | 0.0271 | 91.99 | 0.014 | 6.18 | 9.5 |"
        in docgen_speed.render_gpu_runs(src)
    )
    assert "| abc (after) | installed | 10.0 | – | 7.0 | 3.0 | 2.50 | – | – | 1 |" in docgen_speed.render_startup(src)
    after = {**src["startup"]["after"], "torchvision": False, "imports_s": {"pytorch_lightning": 3.0}}
    after["imports_cpu_s"], after["median"] = {"pytorch_lightning": 2.5}, {**after["median"], "cpu_s": 9.0}
    legs = {"startup_torchvision": {"after": after, "loadavg": [1.0, 1.5]}}
    assert "| abc (after) | absent | 10.0 | 9.00 | 7.0 | 3.0 | 2.50 | 3.00 | 2.50 | 1 |" in docgen_speed.render_startup(
        legs, "startup_torchvision"
    )
    assert set(docgen_speed.RENDERERS) <= set(docgen.RENDERERS)
