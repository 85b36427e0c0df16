"""The tables of docs/results.md on the tuned defaults (issue 44), for :mod:`mnp.tools.docgen` (its ``RENDERERS``
include these), from ``results/paper_tuned/`` (``python -m mnp.tools.report <paper_tuned sweep> --out
results/paper_tuned --seeds 0 ... 9 --no-plots``: runs.csv, results.csv, the archived test predictions) against the
untuned cells of ``results/paper_main/runs.csv``, and ``benchmarks/unseen_seeds_tuned.json``
(``python benchmarks/unseen_seeds.py <runs of seeds 10-17> --runs results/paper_tuned/runs.csv``)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
from scipy import stats as st

from mnp.tools.docgen.docgen_decisions import unseen_table
from mnp.tools.docgen.docgen_results import UNITS, claims_table, p_text, with_notes
from mnp.tools.docgen.docgen_sources import reading
from mnp.tools.report.report_records import claims, read_runs, seed_values
from mnp.tools.report.report_runs import MODEL_ORDER, dataset_label, markdown_table, model_label, read_cells
from mnp.tools.report.row_claims import ROW_METRICS, add_row_tests, archive_path
from mnp.tools.report.stats import bootstrap_means, t_interval

TUNED = "paper_tuned"
CHANGE_METRICS = ("test/acc", "test/ece", "noise/acc_mean", "test/nll")
CALIBRATION = (
    ("test/ece", "ECE"),
    ("test/ece_floor", "ECE of a calibrated model"),
    ("test/ce_debiased", "debiased CE"),
)


def sources(root: Path) -> dict:
    folder = root / "results" / TUNED
    if not (folder / "runs.csv").is_file():
        return {"tuned": None, "unseen_seeds_tuned": []}
    with reading(folder / "runs.csv"):
        records = read_runs(folder / "runs.csv")
    with reading(folder / "results.csv"):
        found = claims(records, read_cells(folder / "results.csv"))
    add_row_tests(found, folder)
    unseen, rows = root / "benchmarks" / "unseen_seeds_tuned.json", []
    if unseen.is_file():
        with reading(unseen):
            rows = json.loads(unseen.read_text())["rows"]
    return {"tuned": {"records": records, "claims": found, "root": folder}, "unseen_seeds_tuned": rows}


def _groups(records: dict) -> list[tuple[str, str]]:
    """The (dataset, model) pairs of the tuned records, in the paper's order."""
    pairs = {(d, m) for (e, m, d, v, _) in records if e == TUNED and v is None}
    return sorted(pairs, key=lambda p: (p[0], MODEL_ORDER.index(p[1]) if p[1] in MODEL_ORDER else 99))


def _values(records: dict, experiment: str, model: str, dataset: str, metric: str) -> list[float]:
    return list(seed_values(records, (experiment, model, None, dataset), metric).values())


def _num(x: float, metric: str) -> str:
    _, scale, digits = UNITS.get(metric, ("", 1, 3))
    return f"{x * scale:.{digits}f}"


def change(default: list[float], tuned: list[float], metric: str) -> str:
    """``89.67 → 91.67 (p = 0.003)``: the untuned and tuned means and Welch's two-sample p (the seeds of two
    configurations are independent draws, not pairs)."""
    if not default or not tuned:
        return "–" if not tuned else f"– → {_num(np.mean(tuned), metric)}"
    text = f"{_num(np.mean(default), metric)} → {_num(np.mean(tuned), metric)}"
    if len(default) > 1 and len(tuned) > 1 and (np.std(default) > 0 or np.std(tuned) > 0):
        with warnings.catch_warnings():  # one side constant (TMC's accuracy): scipy warns of precision, p is sound
            warnings.simplefilter("ignore", RuntimeWarning)
            p = float(st.ttest_ind(tuned, default, equal_var=False).pvalue)
        text += f" ({p_text(p)})"
    return text


def render_tuned_changes(src: dict) -> str:
    """Per model and dataset: its untuned (paper_main) and tuned (paper_tuned) means over seeds 0-9, Welch's p."""
    if not src["tuned"]:
        return "No tuned table has been run yet."
    tuned, default = src["tuned"]["records"], src["records"]
    rows = []
    for d, m in _groups(tuned):
        cells = [
            change(_values(default, "paper_main", m, d, k), _values(tuned, TUNED, m, d, k), k) for k in CHANGE_METRICS
        ]
        rows.append([dataset_label(d), model_label(m), *cells, len(_values(tuned, TUNED, m, d, "test/acc"))])
    header = ["dataset", "model", *(f"{UNITS[k][0]}: untuned → tuned" for k in CHANGE_METRICS), "seeds"]
    return markdown_table(header, rows)


def row_interval(root: Path, model: str, dataset: str, metric: str = "test/acc") -> tuple[float, float] | None:
    """The 95 % two-level bootstrap interval (seeds, then the shared test rows) of ``metric``'s mean, from the
    archived per-run test predictions; None where they are not archived."""
    path = archive_path(root, TUNED, model, dataset)
    if not path.is_file():
        return None
    with np.load(path) as z:
        scores = ROW_METRICS[metric](z["probs"].astype(np.float64), z["labels"])
    lo, hi = np.percentile(bootstrap_means(scores), [2.5, 97.5])
    return float(lo), float(hi)


def _mean_ci(values: list[float], metric: str) -> str:
    if not values:
        return "–"
    ci, mean = t_interval(values), float(np.mean(values))
    if not ci:
        return _num(mean, metric)
    zero = "‡" if np.std(values) <= 1e-9 * max(1.0, abs(mean)) else ""  # the note of docgen_results.ZERO_WIDTH
    return f"{_num(mean, metric)} [{_num(ci[0], metric)}, {_num(ci[1], metric)}]{zero}"


def render_tuned_cells(src: dict) -> str:
    """Per model on each tuned dataset: accuracy with its seed interval and its interval over seeds and test rows,
    ECE beside the ECE a perfectly calibrated model scores on the same rows, and the debiased calibration error."""
    if not src["tuned"]:
        return "No tuned table has been run yet."
    records, root = src["tuned"]["records"], src["tuned"]["root"]
    rows = []
    for d, m in _groups(records):
        acc = _values(records, TUNED, m, d, "test/acc")
        both = row_interval(root, m, d)
        rows.append(
            [dataset_label(d), model_label(m), _mean_ci(acc, "test/acc"),
             f"[{_num(both[0], 'test/acc')}, {_num(both[1], 'test/acc')}]" if both else "–",
             *(_mean_ci(_values(records, TUNED, m, d, k), "test/ece") for k, _ in CALIBRATION),
             _mean_ci(_values(records, TUNED, m, d, "test/nll"), "test/nll")]
        )  # fmt: skip
    header = ["dataset", "model", "acc % [seeds]", "acc % [seeds and test rows]", *(label for _, label in CALIBRATION)]
    return with_notes(markdown_table([*header, "NLL"], rows))


def final_verdict(r: dict) -> str:
    """The verdict a claim keeps: Holm's, and where the test rows were tested, only if that test agrees."""
    v = r.get("verdict_holm") or r["verdict"]
    rows = r.get("verdict_rows")
    return v if rows is None or rows == v or v == "not significant" else f"not significant on the test rows ({v})"


def render_tuned_claims(src: dict) -> str:
    """The claims at the tuned defaults, then those whose kept verdict differs from the untuned cells'."""
    if not src["tuned"]:
        return "No tuned table has been run yet."
    found = [r for r in src["tuned"]["claims"] if r["experiment"] == TUNED]
    if not found:
        return "No claim yet: `mnp` has no tuned runs in results/paper_tuned."
    before = {(r["dataset"], r["baseline"], r["metric"]): r for r in src["claims"] if r["experiment"] == "paper_main"}
    moved = []
    for r in found:
        old = before.get((r["dataset"], r["baseline"], r["metric"]))
        if old is not None and final_verdict(old) != final_verdict(r):
            moved.append(
                [dataset_label(r["dataset"]), model_label(r["baseline"]), UNITS[r["metric"]][0], final_verdict(old),
                 final_verdict(r)]
            )  # fmt: skip
    text = claims_table(found)
    lines = f"{len(moved)} of {len(found)} claims changed their kept verdict (Holm, and the test rows where tested)"
    if not moved:
        return f"{text}\n\n{lines}."
    table = markdown_table(["dataset", "MNP beats", "metric", "untuned", "tuned"], moved)
    return f"{text}\n\n{lines}:\n\n{table}"


def render_unseen_seeds_tuned(src: dict) -> str:
    """The tuned cells (seeds 0-9) against seeds 10-17, which no study, decision or table saw."""
    return unseen_table(src["unseen_seeds_tuned"]) if src["unseen_seeds_tuned"] else "No unseen seed has been run yet."


RENDERERS = {
    "unseen_seeds_tuned": render_unseen_seeds_tuned,
    "tuned_changes": render_tuned_changes,
    "tuned_cells": render_tuned_cells,
    "tuned_claims": render_tuned_claims,
}
