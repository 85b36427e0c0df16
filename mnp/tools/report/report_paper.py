"""Comparison with the paper's numbers (docs/method.md §7) for ``python -m mnp.tools.report --paper``.

The paper's means are package data, ``mnp/tools/report/paper_results.csv`` (table, model, dataset, metric,
value as printed in the paper: accuracy in %; ``speed-up/<train|test>`` is MGP time / MNP time).
"""

from __future__ import annotations

import csv
from importlib import resources

from mnp.tools.report.report_runs import DATASET_ORDER, MODEL_ORDER, dataset_label, markdown_table, model_label
from mnp.tools.report.report_tables import ACC, ECE, NOISY_ACC, Metric

PAPER_FILE = "paper_results.csv"
SPEEDUP = "speed-up/"


def paper_rows() -> list[dict[str, str]]:
    """The rows of the data file, comment lines (``#``) left out."""
    text = resources.files("mnp.tools.report").joinpath(PAPER_FILE).read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


def metric_for(key: str) -> Metric:
    return {m.key: m for m in (ACC, ECE, NOISY_ACC)}.get(key) or Metric(key, True)


def paper_values() -> dict[tuple[str, str, str], float]:
    """(model, dataset, metrics.json key) -> the paper's mean, in metrics.json units (fractions)."""
    return {
        (r["model"], r["dataset"], r["metric"]): float(r["value"]) / metric_for(r["metric"]).scale
        for r in paper_rows()
        if not r["metric"].startswith(SPEEDUP)
    }


def paper_speedups() -> dict[str, dict[str, float]]:
    """dataset -> {"train": x, "test": y}: the paper's speed-up of MNP over MGP (Table 5)."""
    out: dict[str, dict[str, float]] = {}
    for r in paper_rows():
        if r["metric"].startswith(SPEEDUP):
            out.setdefault(r["dataset"], {})[r["metric"][len(SPEEDUP) :]] = float(r["value"])
    return out


def paper_comparison(agg: dict) -> list[dict]:
    """Rows (experiment, model, dataset, metric, ours, std, n, paper, diff) for every cell the paper reports."""
    paper = paper_values()
    out = []
    for (e, m, v, d, k), c in sorted(agg.items(), key=lambda kv: str(kv[0])):
        if v is None and (m, d, k) in paper:
            out.append(
                {
                    "experiment": e,
                    "model": m,
                    "dataset": d,
                    "metric": k,
                    "ours": c.mean,
                    "std": c.std,
                    "n": c.n,
                    "paper": paper[(m, d, k)],
                    "diff": c.mean - paper[(m, d, k)],
                }
            )
    return out


def paper_md(rows: list[dict], speed: dict[str, dict[str, dict[str, float]]]) -> str:
    """The comparison section: ``rows`` of :func:`paper_comparison`, and ``speed`` (experiment ->
    dataset -> our speed-ups) against the paper's."""
    morder = {m: i for i, m in enumerate(MODEL_ORDER)}
    dorder = {d: i for i, d in enumerate(DATASET_ORDER)}
    table = []
    for r in sorted(
        rows, key=lambda r: (r["experiment"], morder.get(r["model"], 99), dorder.get(r["dataset"], 99), r["metric"])
    ):
        mt = metric_for(r["metric"])
        table.append(
            [r["experiment"], model_label(r["model"]), dataset_label(r["dataset"]), r["metric"], mt.fmt(r["ours"]),
             mt.fmt(r["paper"]), f"{r['diff'] * mt.scale:+.{mt.digits}f}"]
        )  # fmt: skip
    paper_speed = paper_speedups()
    table += [
        [e, "MNP/MGP", dataset_label(d), f"speed-up {k}", f"{v[k]:.2f}", f"{p:.2f}", f"{v[k] - p:+.2f}"]
        for e, s in speed.items()
        for d, v in s.items()
        for k in ("train", "test")
        if k in v and (p := paper_speed.get(d, {}).get(k)) is not None
    ]
    return (
        "## Comparison with the paper (docs/method.md §7)\n\nOurs (mean over seeds) / paper; Δ = ours − paper, in the "
        "table's units.\n\n"
        + markdown_table(["Experiment", "Method", "Dataset", "Metric", "Ours", "Paper", "Δ"], table)
    )
