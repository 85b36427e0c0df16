"""The conformal study's path from runs to docs (issue 47, conf/experiment/conformal.yaml): tiny experiment=conformal
runs of two models on two seeds, their report (results.csv, claims.csv, results.md), the generated docs section and
the figure's numbers, each against the runs' own metrics.json; the finite-sample floor against its closed form."""

from __future__ import annotations

import csv
import json
import math
import shutil

import numpy as np
import pytest
from cfg_utils import ROOT, compose_train
from scipy import stats

from mnp.tools.docgen.docgen_conformal import STUDY, render_conformal, sources, stale_figure
from mnp.tools.figures import conformal_figure
from mnp.tools.report.report import report
from mnp.tools.report.report_conformal import coverage_floor, with_conformal_means
from mnp.tools.report.report_runs import model_label

MODELS, SEEDS = ("mnp", "mcd"), (0, 1)
TINY = [
    "experiment=conformal",
    "dataset=synthetic",
    "dataset.num_views=2",
    "dataset.n_train=200",
    "dataset.n_test=100",
    "trainer.max_epochs=2",
    "eval.noise_levels=[0.1,1.0]",
    "require_tuned=false",  # the toy data has no tuning study
]
MNP_TINY = ["model.encoder.d_e=16", "model.memory.size=20", "model.warmup.epochs=0"]
CLAIMED = ("conformal/noise/coverage_mean", "conformal/missing/coverage_mean", "conformal/test/size")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A root with conf/experiment/conformal.yaml, the runs under logs/, their report in results/conformal/ and the
    figure in figures/; and each run's metrics.json by (model, seed)."""
    import torch

    from mnp.cli.pipeline import train

    root, threads = tmp_path_factory.mktemp("study"), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for model in MODELS:
            for seed in SEEDS:
                extra = MNP_TINY if model == "mnp" else []
                out = root / "logs" / "conformal" / "multiruns" / f"{model}_s{seed}"
                train(compose_train(out, [*TINY, f"model={model}", f"seed={seed}", *extra]))
    finally:
        torch.set_num_threads(threads)
    report([root / "logs"], root / "results" / "conformal", plots=False)
    (root / STUDY).parent.mkdir(parents=True)
    shutil.copy(ROOT / STUDY, root / STUDY)
    conformal_figure.write(root / "results" / "conformal" / "results.csv", root / "figures")
    runs = {
        (m, s): json.loads((root / "logs" / "conformal" / "multiruns" / f"{m}_s{s}" / "metrics.json").read_text())
        for m in MODELS
        for s in SEEDS
    }
    return root, runs


def values(runs: dict, model: str, key: str) -> list[float]:
    return [runs[(model, s)][key] for s in SEEDS]


def hand_interval(x: list[float]) -> tuple[float, float]:
    half = stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / math.sqrt(len(x))
    return float(np.mean(x) - half), float(np.mean(x) + half)


def read_rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_the_report_aggregates_the_runs_conformal_metrics_over_seeds(study):
    root, runs = study
    out = root / "results" / "conformal"
    cells = {(r["model"], r["metric"]): r for r in read_rows(out / "results.csv")}
    keys = [*CLAIMED, "conformal/test/coverage", "conformal/noise/coverage@1", "conformal/missing/size@v1"]
    for m in MODELS:
        assert runs[(m, 0)]["experiment"] == "conformal" and runs[(m, 0)]["conformal/method"] == "aps"
        for k in keys:
            x, c = values(runs, m, k), cells[(m, k)]
            assert float(c["mean"]) == pytest.approx(np.mean(x), abs=1e-12), (m, k)
            low, high = hand_interval(x)
            assert (float(c["ci95_low"]), float(c["ci95_high"])) == pytest.approx((low, high), abs=1e-12)
            assert (c["n"], c["experiment"], c["source"]) == ("2", "conformal", "runs")
    md = (out / "results.md").read_text()
    caption = "Synthetic: conformal sets (eval.conformal, validation rows) on the clean test rows"
    table = md.split(caption, 1)[1].split("\n\n")[1].splitlines()
    assert table[0] == (
        "| Method | coverage % ↑ | size ↓ | noisy coverage % ↑ | noisy size ↓ | view missing: coverage % ↑ | "
        "view missing: size ↓ |"
    )
    mnp_row = next(line for line in table if line.startswith(f"| {model_label('mnp')} |"))
    assert f"{100 * np.mean(values(runs, 'mnp', 'conformal/test/coverage')):.2f}" in mnp_row.split("|")[2]


@pytest.mark.slow
def test_the_claims_are_paired_tests_of_mnps_sets_with_holm_p_values(study):
    root, runs = study
    found = {(r["baseline"], r["metric"]): r for r in read_rows(root / "results" / "conformal" / "claims.csv")}
    for k in CLAIMED:
        r, ours, theirs = found[("mcd", k)], values(runs, "mnp", k), values(runs, "mcd", k)
        assert float(r["difference"]) == pytest.approx(np.mean(ours) - np.mean(theirs), abs=1e-12)
        d = np.subtract(ours, theirs)
        expect = stats.ttest_rel(ours, theirs).pvalue if np.ptp(d) > 1e-12 else float(abs(d.mean()) <= 1e-12)
        assert float(r["p_value"]) == pytest.approx(expect, rel=1e-9) and r["n"] == "2"
        assert float(r["p_holm"]) == float(r["p_value"])  # one baseline: a family of one claim


@pytest.mark.slow
def test_the_docs_section_shows_the_runs_with_intervals_and_the_claims(study):
    root, runs = study
    src = sources(root)
    text = render_conformal(src)
    mnp_row = next(line for line in text.splitlines() if line.startswith(f"| Synthetic | {model_label('mnp')} |"))
    x = values(runs, "mnp", "conformal/noise/coverage_mean")
    low, high = hand_interval(x)
    assert f"| {100 * np.mean(x):.2f} [{100 * low:.2f}, {100 * high:.2f}]" in mnp_row
    floor = coverage_floor(runs[("mnp", 0)]["conformal/n_cal"], 100, 0.1)
    assert mnp_row.endswith(f"| {100 * floor:.1f} | 2 |") and runs[("mnp", 0)]["conformal/n_cal"] == 40
    header = "| dataset | MNP's sets beat | noisy coverage % | view missing: coverage % | set size |"
    claim_row = text.split(header, 1)[1].splitlines()[2]
    assert claim_row.startswith("| Synthetic | MCD | ")
    assert claim_row.count("2 seeds") == 3 and "p " in claim_row
    assert "![coverage and mean set size against σ" in text and stale_figure(root, src) is None
    (root / "figures" / "conformal_curves.json").write_text("{}\n")
    assert stale_figure(root, src) == root / "figures" / "conformal_curves.json"
    conformal_figure.write(root / "results" / "conformal" / "results.csv", root / "figures")


@pytest.mark.slow
def test_the_figure_json_holds_the_runs_numbers_per_sigma(study):
    root, runs = study
    data = json.loads((root / "figures" / "conformal_curves.json").read_text())
    assert list(data) == ["synthetic"] and data["synthetic"]["alpha"] == 0.1
    assert (root / "figures" / "conformal_curves.png").stat().st_size > 10_000
    for m in MODELS:
        panel = data["synthetic"]["models"][m]
        for name, prefix, scale in (
            ("coverage", "conformal/noise/coverage@", 100),
            ("size", "conformal/noise/size@", 1),
            ("acc", "noise/acc@", 100),
        ):
            assert panel[name]["sigma"] == [0.1, 1.0]
            expect = [round(scale * np.mean(values(runs, m, f"{prefix}{s:g}")), 4) for s in (0.1, 1.0)]
            assert panel[name][name] == pytest.approx(expect, abs=1e-9), (m, name)
        clean = round(100 * np.mean(values(runs, m, "conformal/test/coverage")), 4)
        assert panel["clean"]["coverage"] == pytest.approx(clean, abs=1e-9)


def test_before_the_study_has_run_the_section_says_so_with_its_commands(tmp_path, capsys):
    (tmp_path / STUDY).parent.mkdir(parents=True)
    shutil.copy(ROOT / STUDY, tmp_path / STUDY)
    src = sources(tmp_path)
    assert render_conformal(src) == (
        "The study is declared (`conf/experiment/conformal.yaml`) and not yet run: there is no `results/conformal/`. "
        "Run `python train.py -m experiment=conformal dataset=cub [launcher=joblib]`, then `python -m mnp.tools.report "
        "logs/conformal/multiruns --out results/conformal --no-plots`; `python -m mnp.tools.docgen` then writes this "
        "section and the figure from the report."
    )
    assert stale_figure(tmp_path, src) is None
    assert conformal_figure.main(["--results", str(tmp_path / "results.csv"), "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().out == (
        f"error: {tmp_path / 'results.csv'} does not exist: run the study and its report (conf/experiment/conformal.yaml)\n"
    )


def betabinomial_quantile(level: float, m: int, a: int, b: int) -> int:
    """The least k with P(K <= k) >= level, K ~ Beta-binomial(m, a, b), summed from its pmf."""
    log_beta = lambda x, y: math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)  # noqa: E731
    total = 0.0
    for k in range(m + 1):
        log_comb = math.lgamma(m + 1) - math.lgamma(k + 1) - math.lgamma(m - k + 1)
        total += math.exp(log_comb + log_beta(k + a, m - k + b) - log_beta(a, b))
        if total >= level:
            return k
    return m


@pytest.mark.parametrize("n_cal, n_test, alpha", [(40, 100, 0.1), (96, 120, 0.1), (500, 2000, 0.05)])
def test_the_coverage_floor_is_the_beta_binomial_quantile(n_cal, n_test, alpha):
    r = math.ceil((n_cal + 1) * (1 - alpha) - 1e-9)
    expect = betabinomial_quantile(0.01, n_test, r, n_cal + 1 - r) / n_test
    assert coverage_floor(n_cal, n_test, alpha) == expect < 1 - alpha


def test_a_coverage_below_the_floor_is_marked():
    cell = lambda mean: {"mean": mean, "std": 0.01, "n": 5, "ci": (mean - 0.01, mean + 0.01), "source": "runs"}  # noqa: E731
    floor = coverage_floor(40, 100, 0.1)
    res = {}
    for m, coverage in (("mnp", floor + 0.005), ("mgp", floor - 0.005)):
        res.update({(m, "", "pie", k): cell(v) for k, v in (("conformal/alpha", 0.1), ("conformal/n_cal", 40))})
        res[(m, "", "pie", "conformal/n_test")] = cell(100)
        res[(m, "", "pie", "conformal/test/coverage")] = cell(coverage)
    text = render_conformal({"conformal": res, "conformal_claims": [], "conformal_commands": []})
    rows = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| PIE |")}
    assert f"| {100 * (floor - 0.005):.2f} [" in rows["MGP"] and "] ✗ |" in rows["MGP"]
    assert "✗" not in rows[model_label("mnp")] and list(rows) == ["MGP", model_label("mnp")]  # the paper's order


def test_a_run_without_the_mean_over_views_gets_it_from_its_views():
    records = {
        ("conformal", "mnp", "pie", None, 0): {
            "conformal/missing/coverage@v0": 0.8,
            "conformal/missing/coverage@v1": 0.9,
        },
        ("conformal", "mnp", "pie", None, 1): {"conformal/noise/size@1": 2.0, "conformal/noise/size_mean": 3.0},
    }
    with_conformal_means(records)
    assert records[("conformal", "mnp", "pie", None, 0)]["conformal/missing/coverage_mean"] == pytest.approx(0.85)
    assert records[("conformal", "mnp", "pie", None, 1)]["conformal/noise/size_mean"] == 3.0  # a recorded mean stays
