"""The tuning studies' table of docs/tuning.md, for :mod:`mnp.tools.docgen` (its ``RENDERERS`` include it), from the
committed study records ``results/tuning/studies/<model>_<dataset>/trials.csv`` (copied from a study's directory as
it runs; ``python -m mnp.tune.apply`` writes the finished one's ``results/tuning/<model>_<dataset>.csv``)."""

from __future__ import annotations

from pathlib import Path

from mnp.tools.report.report_runs import dataset_label, markdown_table, model_label
from mnp.tune.records import header, read_trials


def study(path: Path) -> dict:
    """One study's trials.csv: its budget, trials finished, the defaults' (trial 0) and the best mean fold score, the
    seed check's winner and its mean over seeds and folds (None in a record without a finished check) and the
    chosen trial's settings."""
    text = path.read_text()
    rows, done, budget = read_trials(text)
    complete = [r for r in done if r["state"] == "complete"]
    best = min(complete, key=lambda r: float(r["mean"])) if complete else None
    first = rows[0] if rows and rows[0]["trial"] == "0" and rows[0]["state"] == "complete" else None
    chosen = next((r for r in rows if r["chosen"] == "True"), best)
    checked = header(text).get("chosen_by", "").startswith("seed check") and chosen and chosen.get("seeds_mean")
    return {
        "budget": budget,
        "done": len(done),
        "pruned": sum(r["state"] == "pruned" for r in done),
        "failed": sum(r["state"] == "fail" for r in done),
        "default": float(first["mean"]) if first else None,
        "best": float(best["mean"]) if best else None,
        "best_trial": int(best["trial"]) if best else None,
        "check": float(chosen["seeds_mean"]) if checked else None,
        "check_trial": int(chosen["trial"]) if checked else None,
        "settings": chosen["settings"] if chosen else "",
    }


def sources(root: Path) -> dict:
    return {p.parent.name: study(p) for p in sorted((root / "results" / "tuning" / "studies").glob("*/trials.csv"))}


def render_tuning(src: dict) -> str:
    """Per study: trials finished of the budget, pruned and failed ones, the mean fold val NLL of the defaults
    (trial 0) and of the best trial, the seed check's winner's mean over its seeds and folds, and the settings of the
    chosen trial (the seed check's winner, or the study's best until its check is finished)."""
    if not src["tuning"]:
        return "No study has been recorded yet."
    fmt = lambda v: "–" if v is None else f"{v:.4f}"  # noqa: E731
    rows = []
    for name, s in src["tuning"].items():
        model, dataset = name.rsplit("_", 1)
        best = fmt(s["best"]) + (f" (trial {s['best_trial']})" if s["best_trial"] is not None else "")
        check = fmt(s.get("check")) + (f" (trial {s['check_trial']})" if s.get("check_trial") is not None else "")
        rows.append(
            [f"{model_label(model)} on {dataset_label(dataset)}", f"{s['done']} of {s['budget']} ({s['pruned']}, "
             f"{s['failed']})", fmt(s["default"]), best, check, f"`{s['settings']}`"]
        )  # fmt: skip
    header = [
        "study",
        "trials (pruned, failed)",
        "val NLL, defaults",
        "val NLL, best",
        "val NLL, the seed check's winner (every seed)",
        "the chosen trial's settings",
    ]
    return markdown_table(header, rows)


RENDERERS = {"tuning": render_tuning}
