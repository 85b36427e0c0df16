"""The decision tables of docs/switches.md, from ``results/decisions/<model>_<dataset>.csv`` (written by
:mod:`mnp.tools.select`), and the check of the reported cells on unseen seeds in docs/results.md, from
``benchmarks/unseen_seeds.json``, for :mod:`mnp.tools.docgen` (its ``RENDERERS`` include these)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from mnp.tools.docgen.docgen_sources import reading
from mnp.tools.report.report_runs import dataset_label, markdown_table, model_label
from mnp.tools.select.decision_record import BEST_MEAN

COLUMNS = [
    ("val/acc", "val acc %", 100, 2),
    ("val/ece", "val ECE", 1, 3),
    ("val/nll", "val NLL", 1, 3),
    ("val/noise/acc_mean", "val noisy acc %", 100, 2),
]


def sources(root: Path) -> dict:
    """{"decisions": [row, ...]} of every decision record, in file order."""
    rows, folder = [], root / "results" / "decisions"
    for path in sorted(p for p in folder.glob("*.csv") if p.name != "open.csv"):
        with reading(path), path.open() as f:
            rows += [{**r, "file": path.relative_to(root).as_posix()} for r in csv.DictReader(f)]
    still_open, open_path = [], folder / "open.csv"
    if open_path.is_file():
        with reading(open_path), open_path.open() as f:
            still_open = list(csv.DictReader(f))
    unseen, unseen_rows = root / "benchmarks" / "unseen_seeds.json", []
    if unseen.is_file():
        with reading(unseen):
            unseen_rows = json.loads(unseen.read_text())["rows"]
    return {"decisions": rows, "decisions_open": still_open, "unseen_seeds": unseen_rows}


def _num(row: dict, key: str, scale: float, digits: int) -> str:
    value = row.get(key, "")
    return f"{float(value) * scale:.{digits}f}" if value not in ("", None) else "–"


def _rule(row: dict) -> str:
    """The choice rule when it is not the best mean (records before the ``rule`` column: the best mean)."""
    rule = row.get("rule") or BEST_MEAN
    return "" if rule == BEST_MEAN else "; " + rule.removeprefix(f"{BEST_MEAN}, ")


def render_decisions(src: dict) -> str:
    """One table row per candidate: its setting, validation metrics, criterion, paired test, and the choice."""
    head = [
        "model",
        "dataset",
        "decision",
        "candidate setting",
        *(label for _, label, _, _ in COLUMNS),
        "criterion",
        "diff vs default",
        "p",
        "seeds",
        "chosen",
    ]
    rows = []
    for r in src["decisions"]:
        setting = r["setting"] or r["candidate"]
        status = "" if r["status"] == "decided" else f" ({r['status']})"
        p = r["p_vs_default"]
        rows.append(
            [
                model_label(r["model"]),
                dataset_label(r["dataset"]),
                r["decision"] + status,
                f"`{setting}`" + (" (reference: the defaults then)" if r["candidate"] == "default" else ""),
                *(_num(r, key, scale, digits) for key, _, scale, digits in COLUMNS),
                f"{r['criterion']} ({r['goal']}{_rule(r)})",
                "–" if r["candidate"] == "default" else f"{float(r['diff_vs_default']):+.4f}",
                "–" if r["candidate"] == "default" or p in ("", "nan") else f"{float(p):.2g}",
                r["n"],
                "**chosen**" if r["chosen"] == "True" else "",
            ]
        )
    return markdown_table(head, rows)


def render_decisions_open(src: dict) -> str:
    """The defaults not yet decided on validation rows (results/decisions/open.csv), and what each needs."""
    if not src["decisions_open"]:
        return "None: every default of `conf/` that is not the paper's own choice has a decision record above."
    rows = [
        [model_label(r["model"]), dataset_label(r["dataset"]), r["decision"], r["today"], r["chosen_before_on"],
         r["what_it_needs"]]
        for r in src["decisions_open"]
    ]  # fmt: skip
    return markdown_table(["model", "dataset", "setting", "today", "chosen before on", "what deciding it needs"], rows)


def render_unseen_seeds(src: dict) -> str:
    """The committed cells against seeds no decision saw: new mean and interval, Welch's p."""
    return unseen_table(src["unseen_seeds"])


def unseen_table(found: list[dict]) -> str:
    """A row per model, dataset and metric of an unseen_seeds JSON (benchmarks/unseen_seeds.py)."""
    rows = []
    for r in found:
        scale, digits = (1, 3) if r["metric"].endswith("ece") else (100, 2)
        lo_hi = r["new_ci95"]
        interval = f" [{lo_hi[0] * scale:.{digits}f}, {lo_hi[1] * scale:.{digits}f}]" if lo_hi else ""
        p = "–" if r["welch_p"] is None else f"{r['welch_p']:.2g}"
        rows.append(
            [model_label(r["model"]), dataset_label(r["dataset"]), r["metric"],
             f"{r['committed_mean'] * scale:.{digits}f} ({r['committed_n']})", ", ".join(map(str, r["seeds"])),
             f"{r['new_mean'] * scale:.{digits}f}{interval}", "yes" if r["committed_mean_in_new_ci"] else "no", p]
        )  # fmt: skip
    header = ["model", "dataset", "metric", "committed mean (seeds)", "unseen seeds", "their mean [95 % interval]"]
    return markdown_table([*header, "committed mean inside", "Welch p"], rows)


RENDERERS = {
    "decisions": render_decisions,
    "decisions_open": render_decisions_open,
    "unseen_seeds": render_unseen_seeds,
}
