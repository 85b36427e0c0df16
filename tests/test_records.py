"""python -m mnp.tools.report: runs.csv (one row per run), results.csv derived from it with 95 % t-intervals,
legacy aggregates kept and marked, claims.csv of paired tests, --from-runs; checked against numpy/scipy."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from mnp.tools.report.report import main, report

# (model, dataset) -> per seed (acc, ece); mnp beats mgp on pie accuracy on every seed by a varying margin
ACC = {
    ("mnp", "pie"): [0.95, 0.96, 0.98, 0.97],
    ("mgp", "pie"): [0.90, 0.93, 0.92, 0.91, 0.5],
    ("mcd", "pie"): [0.96, 0.95, 0.96],
    ("mnp", "cub"): [0.80],
    ("mgp", "cub"): [0.85],
}
ECE = {
    ("mnp", "pie"): [0.04, 0.05, 0.03, 0.045],
    ("mgp", "pie"): [0.08, 0.07, 0.09, 0.06, 0.2],
    ("mcd", "pie"): [0.02, 0.03, 0.012],
    ("mnp", "cub"): [0.05],
    ("mgp", "cub"): [0.03],
}


def write_run(root: Path, model: str, dataset: str, seed: int, metrics: dict, exp: str = "paper_main") -> None:
    d = root / f"{model}_{dataset}_s{seed}"
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(
        json.dumps(
            {
                "model": model,
                "dataset": dataset,
                "seed": seed,
                "epochs": 3,
                "experiment": exp,
                "flag": True,
                "note": "text",
                **metrics,
            }
        )
    )


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "logs"
    for (m, d), accs in ACC.items():
        for s, a in enumerate(accs):
            extra = {"test/nll": 0.2 - a / 10} if d == "pie" and m != "mcd" else {}
            write_run(root, m, d, s, {"test/acc": a, "test/ece": ECE[(m, d)][s], "noise/acc_mean": a - 0.1, **extra})
    return root


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def results(path: Path) -> dict[tuple, dict]:
    return {(r["model"], r["dataset"], r["metric"], r["variant"]): r for r in rows(path)}


def claims(path: Path) -> dict[tuple, dict]:
    return {(r["dataset"], r["baseline"], r["metric"]): r for r in rows(path)}


def test_runs_csv_has_one_row_per_run_and_every_numeric_metric(sweep, tmp_path):
    write_run(sweep, "mcd", "cub", 0, {"test/acc": 0.7, "test/ece": math.nan, "ood/x/auroc": 0.6})
    report([sweep], tmp_path / "out", plots=False)
    with open(tmp_path / "out" / "runs.csv") as f:
        header = f.readline().strip().split(",")
    metrics = ["noise/acc_mean", "ood/x/auroc", "test/acc", "test/ece", "test/nll"]
    assert header == ["experiment", "model", "dataset", "variant", "seed", *metrics]  # no seed/epochs/bool/text
    got = rows(tmp_path / "out" / "runs.csv")
    assert len(got) == sum(map(len, ACC.values())) + 1
    by = {(r["model"], r["dataset"], int(r["seed"])): r for r in got}
    for (m, d), accs in ACC.items():
        for s, a in enumerate(accs):
            assert float(by[(m, d, s)]["test/acc"]) == a and float(by[(m, d, s)]["test/ece"]) == ECE[(m, d)][s]
            assert by[(m, d, s)]["experiment"] == "paper_main" and by[(m, d, s)]["variant"] == ""
    assert by[("mcd", "cub", 0)]["test/ece"] == "nan" and by[("mcd", "cub", 0)]["test/nll"] == ""
    assert by[("mcd", "pie", 0)]["ood/x/auroc"] == ""
    res = results(tmp_path / "out" / "results.csv")
    assert res[("mcd", "cub", "test/ece", "")]["source"] == "void"  # a non-finite value voids its cell
    assert res[("mcd", "cub", "test/acc", "")]["n"] == "1"


def test_results_csv_is_derived_from_runs_with_t_intervals(sweep, tmp_path):
    report([sweep], tmp_path / "out", plots=False)
    res = results(tmp_path / "out" / "results.csv")
    with open(tmp_path / "out" / "results.csv") as f:
        assert f.readline().strip() == "model,dataset,metric,mean,std,n,ci95_low,ci95_high,source,experiment,variant"
    for (m, d), accs in ACC.items():
        r = res[(m, d, "test/acc", "")]
        a = np.array(accs)
        assert r["source"] == "runs" and int(r["n"]) == len(a) and float(r["mean"]) == pytest.approx(a.mean())
        if len(a) == 1:
            assert r["ci95_low"] == r["ci95_high"] == "" and float(r["std"]) == 0
            continue
        assert float(r["std"]) == pytest.approx(a.std(ddof=1))
        half = st.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / np.sqrt(len(a))
        assert (float(r["ci95_low"]), float(r["ci95_high"])) == pytest.approx((a.mean() - half, a.mean() + half))


def test_claims_are_paired_tests_of_mnp_on_shared_seeds(sweep, tmp_path):
    res = report([sweep], tmp_path / "out", plots=False)
    got = claims(tmp_path / "out" / "claims.csv")
    assert list(rows(tmp_path / "out" / "claims.csv")[0]) == [
        "experiment",
        "model",
        "dataset",
        "metric",
        "baseline",
        "difference",
        "p_value",
        "n",
        "verdict",
        "p_holm",
        "verdict_holm",
        "p_rows",
        "verdict_rows",
    ]
    # pie: mcd and mgp, acc/ece/noisy acc (+ nll against mgp, the only baseline reporting it); cub: mgp
    assert sorted(got) == sorted(
        [("pie", b, k) for b in ("mcd", "mgp") for k in ("test/acc", "test/ece", "noise/acc_mean")]
        + [("pie", "mgp", "test/nll")]
        + [("cub", "mgp", k) for k in ("test/acc", "test/ece", "noise/acc_mean")]
    )
    assert len(res["claims"]) == len(got) and {r["model"] for r in got.values()} == {"mnp"}
    for b in ("mgp", "mcd"):
        for k, vals in (("test/acc", ACC), ("test/ece", ECE)):
            ours, theirs = vals[("mnp", "pie")], vals[(b, "pie")]
            n = min(len(ours), len(theirs))  # shared seeds 0..n-1 (mgp's seed 4 has no mnp partner)
            r = got[("pie", b, k)]
            assert int(r["n"]) == n
            assert float(r["difference"]) == pytest.approx(np.mean(np.subtract(ours[:n], theirs[:n])))
            assert float(r["p_value"]) == pytest.approx(st.ttest_rel(ours[:n], theirs[:n]).pvalue)
    assert got[("pie", "mgp", "test/acc")]["verdict"] == "holds"  # +0.05 on every seed, varying
    assert got[("pie", "mgp", "test/ece")]["verdict"] == "holds"  # lower ECE is better
    assert got[("pie", "mcd", "test/ece")]["verdict"] == "does not hold"
    assert got[("pie", "mcd", "test/acc")]["verdict"] == "not significant"
    one = got[("cub", "mgp", "test/acc")]
    assert (one["verdict"], one["p_value"], one["n"]) == ("too few seeds", "", "1")
    for k in ("test/acc", "test/ece", "noise/acc_mean"):  # Holm over the family (pie, k): mnp against mcd and mgp
        ps = sorted((float(got[("pie", b, k)]["p_value"]), b) for b in ("mcd", "mgp"))
        step = [min(1.0, 2 * ps[0][0]), max(min(1.0, 2 * ps[0][0]), min(1.0, ps[1][0]))]
        for (_, b), want in zip(ps, step):
            assert float(got[("pie", b, k)]["p_holm"]) == pytest.approx(want)
    assert one["p_holm"] == "" and one["verdict_holm"] == "too few seeds"


def test_from_runs_alone_gives_the_same_files(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    report([sweep], out, plots=False)
    first = {n: (out / n).read_text() for n in ("runs.csv", "results.csv", "claims.csv", "results.md")}
    shutil.rmtree(sweep)
    committed = tmp_path / "committed"
    committed.mkdir()
    shutil.copy(out / "runs.csv", committed / "runs.csv")
    assert main(["--from-runs", str(committed / "runs.csv"), "--no-plots"]) == 0  # out: the runs.csv's directory
    assert "(14 runs in runs.csv, 10 claims)" in capsys.readouterr().out
    for n in ("runs.csv", "results.csv", "claims.csv"):
        assert (committed / n).read_text() == first[n], n
    assert (committed / "results.md").read_text().split("\n", 1)[1] == first["results.md"].split("\n", 1)[1]


def test_nothing_to_report_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2 and "--from-runs" in capsys.readouterr().err


LEGACY_CSV = [
    "model,dataset,metric,mean,std,n,experiment,variant",  # a results.csv from before runs.csv
    "mnp,pie,test/acc,0.5,0.1,5,paper_main,",
    "mgp,pie,test/acc,0.9,0.02,5,paper_main,",
    "tmc,pie,test/acc,0.8,0.01,5,paper_main,",
    "tmc,pie,test/ece,0.3,0.01,5,paper_main,",
    "mnp,scene15,test/acc,0.79,0.01,5,paper_main,",
    "mgp,scene15,test/acc,0.77,0.01,5,paper_main,",
]


def test_legacy_cells_are_kept_marked_without_interval_and_never_tested(sweep, tmp_path, caplog):
    """--update into a directory whose results.csv predates runs.csv: the groups the new runs cover are derived
    from them; every other cell stays as it was, marked legacy_aggregate, with no interval; a claim on it is
    untested, with its difference of means only."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("\n".join(LEGACY_CSV) + "\n")
    caplog.set_level("INFO")
    assert main([str(sweep), "--out", str(out), "--no-plots", "--update"]) == 0
    assert "legacy aggregate of paper_main/mnp/None/pie replaced by its per-run records" in caplog.text
    res = results(out / "results.csv")
    assert res[("mnp", "pie", "test/acc", "")]["source"] == "runs" and res[("mnp", "pie", "test/acc", "")]["n"] == "4"
    for key, mean in (
        (("tmc", "pie", "test/acc", ""), "0.8"),
        (("tmc", "pie", "test/ece", ""), "0.3"),
        (("mnp", "scene15", "test/acc", ""), "0.79"),
    ):
        r = res[key]
        assert (r["mean"], r["n"], r["source"]) == (mean, "5", "legacy_aggregate")
        assert r["ci95_low"] == r["ci95_high"] == ""
    got = claims(out / "claims.csv")
    r = got[("pie", "tmc", "test/acc")]
    assert (r["verdict"], r["p_value"], r["n"]) == ("untested (legacy aggregate)", "", "")
    assert float(r["difference"]) == pytest.approx(np.mean(ACC[("mnp", "pie")]) - 0.8)
    assert got[("scene15", "mgp", "test/acc")]["verdict"] == "untested (legacy aggregate)"
    assert got[("pie", "mgp", "test/acc")]["verdict"] == "holds"
    md = (out / "results.md").read_text()
    assert "3 groups are legacy aggregates without per-run records (†): no interval, no test" in md
    assert "| TMC | – | 80.00† (5) |" in md and "(n) = seeds; † legacy aggregate without per-run records" in md
    tex = (out / "results.tex").read_text()
    assert r"80.00$^\dagger$\,{\scriptsize(5)}" in tex and r"$^\dagger$ legacy aggregate" in tex
    # re-deriving from the committed runs.csv keeps the legacy cells as they are
    before = (out / "results.csv").read_text()
    assert main(["--from-runs", str(out / "runs.csv"), "--no-plots"]) == 0
    assert (out / "results.csv").read_text() == before


def test_cells_derived_from_a_missing_runs_csv_are_an_error(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    report([sweep], out, plots=False)
    (out / "runs.csv").unlink()
    assert main([str(sweep), "--out", str(out), "--no-plots", "--update"]) == 1
    assert "holds cells derived from runs.csv, but" in capsys.readouterr().out
