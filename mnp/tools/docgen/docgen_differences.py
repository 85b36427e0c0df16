"""The "Differences from the paper" section of docs/results.md, for :mod:`mnp.tools.docgen` (its ``RENDERERS``
include it), from ``results/differences/gaps.csv`` (``python -m mnp.tools.docgen.differences`` writes it)."""

from __future__ import annotations

from pathlib import Path

from mnp.tools.docgen.differences import OUT, read
from mnp.tools.report.report_runs import dataset_label, model_label

METRICS = {
    "test/acc": "acc %",
    "noise/acc_mean": "noisy acc %",
    "test/ece": "ECE",
    "speed-up/test": "MGP/MNP test time",
}


def sources(root: Path) -> dict:
    path = root / OUT
    return {"differences": read(path) if path.is_file() else []}


def _ours(r: dict) -> str:
    if not r["ours"]:
        return "–"
    interval = f" [{r['ci95_low']}, {r['ci95_high']}]" if r["ci95_low"] else ""
    return f"{r['ours']}{interval}" + (f" ({r['n']})" if r["n"] else "")


def render_differences(src: dict) -> str:
    """A table of the gaps (paper, ours with its interval and seeds, status), then each cause once, with the rows it
    covers: the hypothesis, the experiment's command and what it measured."""
    rows = src["differences"]
    if not rows:
        return "No records: run `python -m mnp.tools.docgen.differences`."
    lines = [
        "| dataset | model | metric | paper | ours [95 % interval] (seeds) | status |",
        "|---|---|---|---|---|---|",
    ]
    causes: dict[tuple, list[str]] = {}
    for r in rows:
        metric = METRICS.get(r["metric"], r["metric"])
        lines.append(
            f"| {dataset_label(r['dataset'])} | {model_label(r['model'])} | {metric} | {r['paper'] or '–'} | "
            f"{_ours(r)} | {r['status']} |"
        )
        key = (r["hypothesis"], r["experiment"], r["outcome"], r["status"])
        causes.setdefault(key, []).append(f"{dataset_label(r['dataset'])} {model_label(r['model'])} {metric}")
    lines.append("")
    for (hypothesis, experiment, outcome, status), covers in causes.items():
        lines.append(
            f"- **{'; '.join(covers)}** ({status}). Hypothesis: {hypothesis}. Experiment: `{experiment}`. "
            f"Measured: {outcome}."
        )
    return "\n".join(lines)


RENDERERS = {"differences": render_differences}
