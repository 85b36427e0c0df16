"""A study's records: ``trials.csv`` (every trial: state, settings, fold scores, mean; then the seed check's runs of
its candidates) and ``best.yaml`` (the winner) in its sweep directory, rewritten after each trial and each batch of
the seed check; :func:`tuned_config` turns a finished study's winner into the config ``conf/tuned/<model>_<dataset>.yaml``
that makes it the default (``python -m mnp.tune.apply``)."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from optuna.trial import TrialState

from datamodules.files import atomic_write
from mnp.tune.seedcheck import Outcome, outcome

# a study's trial rows have its own training seed; a seed-check row (state "seed check ...") one candidate's folds at
# another seed; seeds_mean: a checked candidate's mean over every seed and fold
COLUMNS = [
    "trial",
    "seed",
    "state",
    "requeued",
    "settings",
    "folds_done",
    "mean",
    "fold_scores",
    "seeds_mean",
    "chosen",
]
BUDGET = re.compile(r"^# budget: (\d+) finished trials", re.M)
HEADER = re.compile(r"^# (\w+): (.*)$", re.M)


def read_trials(text: str) -> tuple[list[dict], list[dict], int | None]:
    """A trials.csv's rows, the finished trials among them (complete, pruned or failed; a requeued one is not) and
    its declared budget (None if the header lacks it)."""
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    done = [r for r in rows if r["requeued"] == "False" and r["state"] in ("complete", "pruned", "fail")]
    budget = BUDGET.search(text)
    return rows, done, int(budget.group(1)) if budget else None


def header(text: str) -> dict[str, str]:
    """A trials.csv's declaration, from its comment lines."""
    return dict(HEADER.findall(text))


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.6g}"


def _round(v: float | None) -> float | None:
    """A score as the records give it: 6 significant digits."""
    return None if v is None else float(_num(v))


def trial_rows(study, result: Outcome) -> list[dict[str, Any]]:
    """One row per trial of the study, the winner marked ``chosen``, then one per seed-check run of a candidate at a
    seed that has begun."""
    chosen = result.chosen.trial.number if result.chosen else None
    checked = {c.trial.number: c for c in result.candidates}
    rows = []
    for t in study.study.trials:
        scores = t.user_attrs.get("fold_scores", [])
        rows.append(
            {
                "trial": t.number,
                "seed": study.train_seed,
                "state": t.state.name.lower(),
                "requeued": bool(t.user_attrs.get("requeued", False)),
                "settings": " ".join(t.user_attrs.get("overrides", [])),
                "folds_done": len(scores),
                "mean": _num(t.value) if t.state == TrialState.COMPLETE else "",
                "fold_scores": " ".join(map(_num, scores)),
                "seeds_mean": _num(checked[t.number].mean) if t.number in checked else "",
                "chosen": t.number == chosen,
            }
        )
    for c in result.candidates:
        for seed, scores in list(c.scores.items())[1:]:
            failed = c.failed.startswith(f"seed {seed},")
            if not scores and not failed:
                continue
            state = "failed" if failed else ("" if len(scores) == c.folds else "unfinished")
            rows.append(
                {
                    "trial": c.trial.number,
                    "seed": seed,
                    "state": f"seed check {state}".strip(),
                    "requeued": False,
                    "settings": " ".join(c.trial.user_attrs.get("overrides", [])),
                    "folds_done": len(scores),
                    "mean": _num(sum(scores) / len(scores)) if not state else "",
                    "fold_scores": " ".join(map(_num, scores)),
                    "seeds_mean": "",
                    "chosen": False,
                }
            )
    return rows


def _csv(rows: list[dict], header: dict[str, Any]) -> str:
    buf = io.StringIO()
    for k, v in header.items():  # the declaration, as comment lines above the table
        buf.write(f"# {k}: {v}\n")
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def declaration(study) -> dict[str, Any]:
    s = study.settings
    pruning = f"MedianPruner after {s.prune_after} folds" if s.prune_after else "no pruning"
    return {
        "study": study.name,
        "model": study.model,
        "dataset": study.dataset,
        "objective": f"mean over {s.folds} stratified folds of the training rows of {s.objective} ({s.direction})",
        "budget": f"{s.n_trials} finished trials; TPE (multivariate, seed {s.seed}, {s.n_startup_trials} start-up "
        f"trials); {pruning}" + ("; trial 0 = the defaults" if study.defaults else ""),
        "space": "; ".join(f"{k} {d!r}" for k, d in study.dists.items()),
        "fixed": " ".join(study.fixed),
        "seed_check": s.seed_check.describe(study.train_seed),
    }


def write_study(study) -> None:
    """``trials.csv`` and, once a trial completed, ``best.yaml``: the winner (the seed check's, or the study's best
    until the check is finished), how it was chosen, its settings as overrides, its fold scores by seed, the check's
    candidates and the study's own best."""
    result = outcome(study)
    head = {**declaration(study), "chosen_by": result.chosen_by}
    text = _csv(trial_rows(study, result), head)
    atomic_write(study.sweep_dir / "trials.csv", lambda tmp: Path(tmp).write_text(text))
    if result.chosen is None:
        return
    pick, best = result.chosen, result.study_best
    record = {
        "trial": pick.trial.number,
        "chosen_by": result.chosen_by,
        "mean": _round(pick.mean if pick.mean is not None else best.value),
        "fold_scores": {seed: list(map(_round, scores)) for seed, scores in pick.scores.items() if scores},
        "overrides": list(pick.trial.user_attrs["overrides"]),
        "candidates": [
            {"trial": c.trial.number, "mean": _round(c.mean), **({"failed": c.failed} if c.failed else {})}
            for c in result.candidates
        ],
        "study_best": {
            "trial": best.number,
            "mean": _round(best.value),
            "fold_scores": list(map(_round, best.user_attrs["fold_scores"])),
            "overrides": list(best.user_attrs["overrides"]),
        },
        **head,
        "seed_check_runs_to_go": result.to_go,
    }
    atomic_write(
        study.sweep_dir / "best.yaml", lambda tmp: Path(tmp).write_text(yaml.safe_dump(record, sort_keys=False))
    )


def unchecked(record: dict) -> str:
    """Why a study's best.yaml names no winner of a finished seed check ("" when it does, or its check is off)."""
    if record.get("seed_check") == "off" or str(record.get("chosen_by", "")).startswith("seed check"):
        return ""
    if "seed_check" not in record:
        return "its record is older than the seed check"
    return f"{record.get('seed_check_runs_to_go')} fold runs to go"


def tuned_config(overrides: list[str], source: str) -> str:
    """The winner's overrides as a ``conf/tuned/<model>_<dataset>.yaml`` (``@package _global_``, nested keys)."""
    tree: dict[str, Any] = {}
    for override in OverridesParser.create().parse_overrides(overrides):  # Hydra's reading of each value
        node = tree
        *parents, leaf = override.key_or_group.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = override.value()
    tree["tuned_from"] = source  # conf/train.yaml: require_tuned checks it, and each run's config keeps it
    body = yaml.safe_dump(tree, sort_keys=True, default_flow_style=False)
    return f"# @package _global_\n# generated by python -m mnp.tune.apply from {source}: do not edit\n{body}"
