"""Claims tested on the test rows: the report archives each run's test probabilities and bootstraps seeds and rows."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from mnp.tools.report.report import report
from mnp.tools.report.stats import row_bootstrap

ROWS, K = 120, 4


def write_run(root, model, seed, probs, labels):
    d = root / f"{model}_cub_s{seed}"
    d.mkdir(parents=True)
    acc = float((probs.argmax(1) == labels).mean())
    nll = float(-np.log(probs[np.arange(len(labels)), labels]).mean())
    meta = {"model": model, "dataset": "cub", "seed": seed, "epochs": 1, "experiment": "paper_main"}
    (d / "metrics.json").write_text(json.dumps({**meta, "test/acc": acc, "test/nll": nll}))
    np.savez(d / "predictions.npz", **{"test/probs": probs.astype(np.float32), "test/labels": labels})


def predictions(rng, labels, wrong):
    """Confident probabilities, right on every row but the ``wrong`` ones."""
    p = np.full((len(labels), K), 0.1 / (K - 1))
    guess = labels.copy()
    guess[wrong] = (labels[wrong] + 1) % K
    p[np.arange(len(labels)), guess] = 0.9
    return p + rng.uniform(0, 1e-3, p.shape)


@pytest.fixture
def sweep(tmp_path):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, K, ROWS)
    for s in range(5):  # MNP wrong on rows 0-9, MGP on 0-12 (3 rows more, the same rows on every seed): a seed
        write_run(tmp_path / "logs", "mnp", s, predictions(rng, labels, np.arange(10)), labels)  # t-test is exact
        write_run(tmp_path / "logs", "mgp", s, predictions(rng, labels, np.arange(13)), labels)
    return tmp_path


def read_claims(path):
    with open(path, newline="") as f:
        return {r["metric"]: r for r in csv.DictReader(f)}


def test_a_gap_of_three_test_rows_holds_by_seeds_but_not_on_the_rows(sweep):
    report([sweep / "logs"], sweep / "out", plots=False)
    archive = sweep / "out" / "predictions" / "paper_main"
    with np.load(archive / "mnp_cub.npz") as z:
        assert z["probs"].shape == (5, ROWS, K) and list(z["seeds"]) == list(range(5)) and z["labels"].shape == (ROWS,)
    got = read_claims(sweep / "out" / "claims.csv")["test/acc"]
    assert got["verdict"] == "holds" and float(got["p_value"]) == 0.0  # every seed +2.5 points: "exact"
    assert got["verdict_rows"] == "not significant" and float(got["p_rows"]) > 0.05
    with np.load(archive / "mnp_cub.npz") as a, np.load(archive / "mgp_cub.npz") as b:
        hit = [(z["probs"].argmax(-1) == z["labels"]).astype(float) for z in (a, b)]
    assert float(got["p_rows"]) == pytest.approx(row_bootstrap(*hit).p_value)
    assert read_claims(sweep / "out" / "claims.csv")["test/nll"]["p_rows"] != ""


def test_the_archive_keeps_earlier_seeds_when_a_report_adds_runs(sweep):
    report([sweep / "logs"], sweep / "out", plots=False)
    rng = np.random.default_rng(1)
    labels = np.load(sweep / "out" / "predictions" / "paper_main" / "mnp_cub.npz")["labels"]
    write_run(sweep / "more", "mnp", 7, predictions(rng, labels, np.arange(5)), labels)
    report([sweep / "more"], sweep / "out", plots=False, update=True)
    with np.load(sweep / "out" / "predictions" / "paper_main" / "mnp_cub.npz") as z:
        assert list(z["seeds"]) == [0, 1, 2, 3, 4, 7]
