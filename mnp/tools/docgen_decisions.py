"""The decision tables of docs/switches.md, from ``results/decisions/<model>_<dataset>.csv`` (written by
:mod:`mnp.tools.select`), for :mod:`mnp.tools.docgen` (its ``RENDERERS`` include these)."""
from __future__ import annotations

import csv
from pathlib import Path

from mnp.tools.report_runs import dataset_label, model_label

COLUMNS = [("val/acc", "val acc %", 100, 2), ("val/ece", "val ECE", 1, 3), ("val/nll", "val NLL", 1, 3),
           ("val/noise/acc_mean", "val noisy acc %", 100, 2)]


def sources(root: Path) -> dict:
    """{"decisions": [row, ...]} of every decision record, in file order."""
    rows, folder = [], root / "results" / "decisions"
    for path in sorted(p for p in folder.glob("*.csv") if p.name != "open.csv"):
        with path.open() as f:
            rows += [{**r, "file": path.relative_to(root).as_posix()} for r in csv.DictReader(f)]
    still_open, open_path = [], folder / "open.csv"
    if open_path.is_file():
        with open_path.open() as f:
            still_open = list(csv.DictReader(f))
    return {"decisions": rows, "decisions_open": still_open}


def _num(row: dict, key: str, scale: float, digits: int) -> str:
    value = row.get(key, "")
    return f"{float(value) * scale:.{digits}f}" if value not in ("", None) else "–"


def render_decisions(src: dict) -> str:
    """One table row per candidate: its setting, validation metrics, criterion, paired test, and the choice."""
    head = ["model", "dataset", "decision", "candidate setting", *(label for _, label, _, _ in COLUMNS),
            "criterion", "diff vs default", "p", "seeds", "chosen"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in src["decisions"]:
        setting = r["setting"] or r["candidate"]
        mark = "**chosen**" if r["chosen"] == "True" else ""
        status = "" if r["status"] == "decided" else f" ({r['status']})"
        p = r["p_vs_default"]
        lines.append("| " + " | ".join([
            model_label(r["model"]), dataset_label(r["dataset"]), r["decision"] + status,
            f"`{setting}`" + (" (reference: the defaults then)" if r["candidate"] == "default" else ""),
            *(_num(r, key, scale, digits) for key, _, scale, digits in COLUMNS),
            f"{r['criterion']} ({r['goal']})", "–" if r["candidate"] == "default" else f"{float(r['diff_vs_default']):+.4f}",
            "–" if r["candidate"] == "default" or p in ("", "nan") else f"{float(p):.2g}", r["n"], mark]) + " |")
    return "\n".join(lines)


def render_decisions_open(src: dict) -> str:
    """The defaults not yet decided on validation rows (results/decisions/open.csv), and what each needs."""
    lines = ["| model | dataset | setting | today | chosen before on | what deciding it needs |", "|---|---|---|---|---|---|"]
    for r in src["decisions_open"]:
        lines.append(f"| {model_label(r['model'])} | {dataset_label(r['dataset'])} | {r['decision']} | {r['today']} | "
                     f"{r['chosen_before_on']} | {r['what_it_needs']} |")
    return "\n".join(lines)


RENDERERS = {"decisions": render_decisions, "decisions_open": render_decisions_open}
