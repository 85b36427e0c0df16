"""The decision record of the selection protocol (docs/method.md §5.4): the declared choice rule over candidates'
validation metrics, and ``results/decisions/<model>_<dataset>.csv``, one row per candidate (:mod:`mnp.tools.select`
makes the candidates)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from mnp.tools.report.report_runs import Run
from mnp.tools.report.stats import paired_test

DEFAULT = "default"
FIELDS = [
    "model",
    "dataset",
    "decision",
    "candidate",
    "setting",
    "seeds",
    "n",
    "criterion",
    "goal",
    "rule",
    "score",
    "diff_vs_default",
    "p_vs_default",
    "chosen",
    "status",
    "note",
]


class SelectionError(ValueError):
    """A request the selection protocol refuses (test metrics, no candidates, no shared seeds)."""


def check_criterion(criterion: str) -> None:
    if not criterion.startswith("val/"):
        raise SelectionError(
            f"the criterion must be a validation metric (val/...), got {criterion!r}: "
            "a default is never chosen on test rows"
        )


def validation_runs(loaded: list[Run], model: str, dataset: str) -> list[Run]:
    """The runs of ``model`` on ``dataset`` among ``loaded`` (:func:`mnp.tools.report.report_runs.load`'s); any of them
    evaluated on the test split is refused."""
    runs = [r for r in loaded if r.model == model and r.dataset == dataset]
    for r in runs:
        if r.metrics.get("eval_split") != "val":
            raise SelectionError(
                f"{r.path} was evaluated on the test split; selection reads only runs of "
                "experiment=select (eval.split=val)"
            )
    return runs


def val_metrics(metrics: dict) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in metrics.items()
        if k.startswith("val/") and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def unshared_seeds(candidates: dict[str, dict[int, dict]]) -> str:
    """A line naming each candidate's seeds that some other candidate has not finished, which :func:`decide` leaves
    out ('' when every candidate has the same seeds)."""
    every = set().union(*map(set, candidates.values()))
    shared = set.intersection(*map(set, candidates.values()))
    lacking = sorted(
        f"{name} has no finished run of seed {_seeds(every - set(per))}"
        for name, per in candidates.items()
        if every - set(per)
    )
    if not lacking:
        return ""
    return f"{'; '.join(lacking)}: decided on seeds {_seeds(shared)} only, those every candidate finished"


def _seeds(seeds) -> str:
    return " ".join(map(str, sorted(seeds))) or "none"


BEST_MEAN = "best mean"


def rule_name(require_p: float | None) -> str:
    """The declared choice rule: the best mean criterion, or with ``require_p`` only a candidate better than
    ``default`` at paired p below it may replace ``default``."""
    return BEST_MEAN if require_p is None else f"{BEST_MEAN}, p < {require_p:g} vs default"


def decide(
    candidates: dict[str, dict[int, dict[str, float]]], criterion: str, higher: bool, require_p: float | None = None
) -> list[dict]:
    """One row per candidate ({name: {seed: val metrics}}) over the seeds every candidate has, the chosen flagged
    under the rule :func:`rule_name` states."""
    check_criterion(criterion)
    if require_p is not None and not 0 < require_p <= 1:
        raise SelectionError(f"--require-p must lie in (0, 1], got {require_p}")
    if DEFAULT not in candidates or len(candidates) < 2:
        raise SelectionError(
            f"a decision needs the '{DEFAULT}' candidate and at least one other, got {sorted(candidates) or 'none'}"
        )
    seeds = sorted(set.intersection(*(set(per_seed) for per_seed in candidates.values())))
    if not seeds:
        raise SelectionError(
            "the candidates share no seed: "
            + "; ".join(f"{name}: {sorted(per_seed)}" for name, per_seed in sorted(candidates.items()))
        )
    base = [candidates[DEFAULT][s].get(criterion, math.nan) for s in seeds]
    rows = []
    for name, per_seed in candidates.items():
        values = [per_seed[s].get(criterion, math.nan) for s in seeds]
        if not all(math.isfinite(v) for v in values):
            raise SelectionError(f"candidate {name} has no finite {criterion} on every seed {seeds}")
        keys = sorted(set.union(*(set(per_seed[s]) for s in seeds)))
        means = {k: float(np.mean([per_seed[s].get(k, math.nan) for s in seeds])) for k in keys}
        test = paired_test(dict(zip(seeds, values)), dict(zip(seeds, base)))
        rows.append(
            {
                "candidate": name,
                "seeds": " ".join(map(str, seeds)),
                "n": len(seeds),
                "criterion": criterion,
                "goal": "max" if higher else "min",
                "rule": rule_name(require_p),
                "score": float(np.mean(values)),
                "diff_vs_default": test.difference,
                "p_vs_default": math.nan if test.p_value is None else test.p_value,
                **means,
            }
        )
    eligible = [r for r in rows if r["candidate"] == DEFAULT or require_p is None or r["p_vs_default"] < require_p]
    best = (max if higher else min)(r["score"] for r in eligible)  # nan p (one seed): never below require_p
    winners = [r["candidate"] for r in eligible if r["score"] == best]
    chosen = DEFAULT if DEFAULT in winners else winners[0]
    for r in rows:
        r["chosen"] = r["candidate"] == chosen
    return sorted(rows, key=lambda r: (r["candidate"] != DEFAULT, r["candidate"]))


def write_decision(
    out: Path, model: str, dataset: str, decision: str, rows: list[dict], status: str, note: str
) -> None:
    """Replace ``decision``'s rows of ``out`` (other decisions kept); val columns follow the fixed ones."""
    kept = []
    if out.is_file():
        with out.open() as f:
            kept = [r for r in csv.DictReader(f) if r["decision"] != decision]
    new = [
        {"model": model, "dataset": dataset, "decision": decision, "status": status, "note": note, **r} for r in rows
    ]
    all_rows = kept + new
    val_cols = sorted({k for r in all_rows for k in r if k.startswith("val/")})
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, FIELDS + val_cols, extrasaction="ignore")
        w.writeheader()
        for r in all_rows:
            w.writerow({k: _cell(r.get(k, "")) for k in FIELDS + val_cols})


def _cell(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)
