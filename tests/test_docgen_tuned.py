"""The tuned-defaults tables of docs/results.md (mnp.tools.docgen.docgen_tuned) on a small report of two models."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as st

from mnp.tools.docgen import docgen_tuned as dt
from mnp.tools.report.report import report
from mnp.tools.report.report_records import claims, read_runs, write_runs
from mnp.tools.report.report_runs import read_cells

ROWS, K, SEEDS = 120, 4, 5
DEFAULT_ACC = {"mnp": [0.95, 0.94, 0.96, 0.95, 0.97], "mgp": [0.85, 0.86, 0.84, 0.85, 0.83]}


def write_run(root, model, seed, wrong, labels, rng):
    """A paper_tuned run wrong on the rows ``wrong`` (the same rows on every seed), confident everywhere."""
    p = np.full((ROWS, K), 0.1 / (K - 1))
    guess = labels.copy()
    guess[wrong] = (labels[wrong] + 1) % K
    p[np.arange(ROWS), guess] = 0.9
    p += rng.uniform(0, 1e-3, p.shape)
    d = root / f"{model}_cub_s{seed}"
    d.mkdir(parents=True)
    acc = float((p.argmax(1) == labels).mean())
    nll = float(-np.log(p[np.arange(ROWS), labels]).mean())
    meta = {"model": model, "dataset": "cub", "seed": seed, "epochs": 1, "experiment": "paper_tuned"}
    metrics = {"test/acc": acc, "test/nll": nll, "test/ece": 0.05, "test/ece_floor": 0.03, "test/ce_debiased": 0.01}
    (d / "metrics.json").write_text(json.dumps({**meta, **metrics}))
    np.savez(d / "predictions.npz", **{"test/probs": p.astype(np.float32), "test/labels": labels})


@pytest.fixture
def src(tmp_path):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, K, ROWS)
    for s in range(SEEDS):  # tuned: MNP wrong on rows 0-9, MGP on 0-12: 3 rows apart on every seed
        write_run(tmp_path / "logs", "mnp", s, np.arange(10), labels, rng)
        write_run(tmp_path / "logs", "mgp", s, np.arange(13), labels, rng)
    report([tmp_path / "logs"], tmp_path / "results" / "paper_tuned", plots=False)
    main = tmp_path / "results" / "paper_main"
    main.mkdir(parents=True)
    write_runs(
        main / "runs.csv",
        {
            ("paper_main", m, "cub", None, s): {"test/acc": a}
            for m, accs in DEFAULT_ACC.items()
            for s, a in enumerate(accs)
        },
    )
    report([], main, plots=False, from_runs=main / "runs.csv")
    records = read_runs(main / "runs.csv")
    return {"records": records, "claims": claims(records, read_cells(main / "results.csv")), **dt.sources(tmp_path)}


def test_the_changes_are_the_two_means_and_welchs_p(src):
    table = dt.render_tuned_changes(src)
    tuned = [v["test/acc"] for k, v in src["tuned"]["records"].items() if k[1] == "mgp"]
    p = st.ttest_ind(tuned, DEFAULT_ACC["mgp"], equal_var=False).pvalue
    want = f"{np.mean(DEFAULT_ACC['mgp']) * 100:.2f} → {np.mean(tuned) * 100:.2f} ({dt.p_text(float(p))})"
    assert f"| CUB | MGP | {want} |" in table
    assert "| CUB | MNP (paper + eq. 8′, CUB: view dropout) | 95.40 → 91.67 " in table


def test_the_rows_interval_is_the_binomial_spread_when_seeds_agree(src):
    lo, hi = dt.row_interval(src["tuned"]["root"], "mnp", "cub")
    acc = 110 / ROWS  # every seed wrong on the same 10 rows: only the test rows' sampling moves the mean
    half = 1.96 * np.sqrt(acc * (1 - acc) / ROWS)
    assert lo == pytest.approx(acc - half, abs=0.01) and hi == pytest.approx(min(acc + half, 1.0), abs=0.01)
    table = dt.render_tuned_cells(src)
    assert "| CUB | MGP | 89.17 [89.17, 89.17]‡ | [" in table  # the seeds alone: no spread, marked
    assert "| 0.050 [0.050, 0.050]‡ | 0.030 [0.030, 0.030]‡ | 0.010 [0.010, 0.010]‡ |" in table
    assert table.endswith("‡ every seed gave the same value: the interval has zero width, not an exact result.")


def test_a_claim_the_test_rows_do_not_support_is_not_kept_and_is_listed_as_moved(src):
    acc = next(r for r in src["tuned"]["claims"] if r["metric"] == "test/acc")
    assert acc["verdict"] == "holds" and acc["verdict_rows"] == "not significant"
    assert dt.final_verdict(acc) == "not significant on the test rows (holds)"
    text = dt.render_tuned_claims(src)
    assert "1 of 3 claims changed their kept verdict" in text
    assert "| CUB | MGP | acc % | holds | not significant on the test rows (holds) |" in text


def test_without_a_tuned_report_the_blocks_say_so(tmp_path):
    src = dt.sources(tmp_path)
    assert dt.render_tuned_changes(src) == "No tuned table has been run yet."
    assert dt.render_unseen_seeds_tuned(src) == "No unseen seed has been run yet."


def test_without_mnps_tuned_runs_there_is_no_claim(src):
    src["tuned"]["claims"] = []
    assert dt.render_tuned_claims(src) == "No claim yet: `mnp` has no tuned runs in results/paper_tuned."
