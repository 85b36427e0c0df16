"""The seed check that ends every study (docs/tuning.md): a study trains each fold with one seed, so a setting that
collapses at another training seed can still win it (ETP on CUB). The study's best complete trials, the candidates,
train their folds again with other seeds (the same folds: only ``seed`` changes, not ``dataset.val_seed``), and the
winner is the candidate with the best mean over every seed and fold; ties go to the study's order.

Its scores live in the study's sqlite file (the study's user attribute ``seed_check``), written after each batch of
fold runs, so a killed check resumes where it stopped; the finished folds of an unrecorded batch are found in their
run directories (``skip_if_done``) and not trained again."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from optuna.trial import FrozenTrial, TrialState

# the study's user attribute: {"study_seed": s, "scores": {trial: {seed: [fold scores]}}, "failed": {trial: why}}
ATTR = "seed_check"
# one batch of fold jobs' outcomes: each its objective value, or the exception it failed with
Launch = Callable[[Sequence[Sequence[str]]], list]


@dataclass
class SeedCheck:
    """``hydra.sweeper.seed_check``: the candidates (the study's best complete trials; 0: no check) and the seeds
    their folds train again with."""

    seeds: list[int] = field(default_factory=lambda: [1, 2])
    candidates: int = 3

    def check(self, study_seed: int) -> None:
        n, seeds = self.candidates, list(self.seeds)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"hydra.sweeper.seed_check.candidates must be an integer >= 0, got {n!r}")
        ints = all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
        if n and (not seeds or not ints or len(set(seeds)) < len(seeds) or study_seed in seeds):
            raise ValueError(
                f"hydra.sweeper.seed_check.seeds must be distinct integers other than the study's seed {study_seed}, "
                f"got {seeds!r}"
            )

    def describe(self, study_seed: int) -> str:
        if not self.candidates:
            return "off"
        seeds, plural = ", ".join(map(str, self.seeds)), "s" if len(self.seeds) > 1 else ""
        return (
            f"the {self.candidates} best complete trials train their folds again with seed{plural} {seeds} (the "
            f"study's: {study_seed}); the winner has the best mean over every seed and fold"
        )


@dataclass
class Candidate:
    """One candidate's fold scores by seed (the study's seed first) and, once one of its runs failed, why."""

    trial: FrozenTrial
    scores: dict[int, list[float]]
    folds: int
    failed: str = ""

    @property
    def finished(self) -> bool:
        return bool(self.failed) or all(len(v) == self.folds for v in self.scores.values())

    @property
    def mean(self) -> float | None:
        """The mean over every seed and fold: the check's score (None while unfinished or after a failure)."""
        if self.failed or not self.finished:
            return None
        values = [v for scores in self.scores.values() for v in scores]
        return sum(values) / len(values)


@dataclass
class Outcome:
    """Where a study's seed check stands and whom it chose (the study's best until it is finished)."""

    candidates: list[Candidate]
    study_best: FrozenTrial | None
    chosen: Candidate | None
    chosen_by: str
    to_go: int  # fold runs still to train


def candidates(study) -> list[FrozenTrial]:
    """The study's best complete trials with distinct settings, best first (ties: the earlier trial)."""
    sign = 1 if study.settings.direction == "minimize" else -1
    complete = [t for t in study.study.trials if t.state == TrialState.COMPLETE]
    ranked, seen = [], set()
    for t in sorted(complete, key=lambda t: (sign * t.value, t.number)):
        key = tuple(t.user_attrs.get("overrides", []))
        if key not in seen:
            seen.add(key)
            ranked.append(t)
    return ranked


def stored(study) -> dict:
    """The check's record in the study: its scores by trial and seed, and why a candidate's run failed."""
    attr = study.study.user_attrs.get(ATTR, {})
    return {"study_seed": attr.get("study_seed"), "scores": attr.get("scores", {}), "failed": attr.get("failed", {})}


def outcome(study) -> Outcome:
    """The candidates with the scores stored so far, and the winner: the check's once every candidate is finished."""
    check, folds, seed0 = study.settings.seed_check, study.settings.folds, study.train_seed
    ranked = candidates(study)
    cands = []
    record = stored(study)
    for t in ranked[: check.candidates]:
        runs = record["scores"].get(str(t.number), {})
        scores = {
            seed0: list(t.user_attrs.get("fold_scores", [])),
            **{s: list(runs.get(str(s), [])) for s in check.seeds},
        }
        cands.append(Candidate(t, scores, folds, record["failed"].get(str(t.number), "")))
    best = ranked[0] if ranked else None
    study_pick = best and Candidate(best, {seed0: list(best.user_attrs.get("fold_scores", []))}, folds)
    if not check.candidates:
        return Outcome([], best, study_pick, "the study (seed check off)", 0)
    to_go = sum(0 if c.failed else folds * len(c.scores) - sum(map(len, c.scores.values())) for c in cands)
    if to_go or not cands:
        return Outcome(
            cands, best, study_pick, f"the study (its seed check is unfinished: {to_go} fold runs to go)", to_go
        )
    sign = 1 if study.settings.direction == "minimize" else -1
    chosen = min(cands, key=lambda c: math.inf if c.mean is None else sign * c.mean)  # min keeps the first of a tie
    seeds = ", ".join(map(str, [seed0, *check.seeds]))
    note = "; every candidate failed a run, so the study's best stays" if chosen.mean is None else ""
    return Outcome(cands, best, chosen, f"seed check (seeds {seeds}; {len(cands)} candidates{note})", 0)


def recorded(stored_study, overrides: set[str]) -> bool:
    """Whether the fold run with these overrides (of the Optuna study ``stored_study``) is a run of the study itself
    or a seed-check run whose score is stored: an unrecorded one's files travel with the study to the next machine
    (benchmarks/device/tune_studies.py)."""
    attr = stored_study.user_attrs.get(ATTR, {})
    given = dict(o.split("=", 1) for o in overrides if "=" in o)
    seed = given.get("seed")
    if seed is None or seed == str(attr.get("study_seed", 0)):
        return True
    for t in stored_study.trials:
        if t.state == TrialState.COMPLETE and set(t.user_attrs.get("overrides", [])) <= overrides:
            runs = attr.get("scores", {}).get(str(t.number), {}).get(seed, [])
            if str(t.number) in attr.get("failed", {}) or len(runs) > int(given["dataset.cv_fold"]):
                return True
    return False


def run(study, launch: Launch, parallel: bool) -> None:
    """Train each candidate's missing fold runs, one at a time or (``parallel``) a candidate's all at once, store
    their scores after each batch and print one line per candidate, then one for the winner."""
    if not study.settings.seed_check.candidates:
        return
    for cand in outcome(study).candidates:
        todo = [] if cand.failed else [(s, f) for s, v in cand.scores.items() for f in range(len(v), cand.folds)]
        for batch in ([todo] if todo else []) if parallel else [[job] for job in todo]:
            values = launch([study.fold_job(cand.trial.user_attrs["overrides"], f, seed=s) for s, f in batch])
            if _store(study, cand.trial.number, batch, values):
                break  # a failed run: the candidate is out, its other runs are not trained
        _progress(next(c for c in outcome(study).candidates if c.trial.number == cand.trial.number))
    result = outcome(study)
    if result.chosen is not None:
        mean = "" if result.chosen.mean is None else f", mean {result.chosen.mean:.4f}"
        best = result.study_best
        _say(
            f"seed check: trial {result.chosen.trial.number} wins{mean} ({result.chosen_by}); the study's best: "
            f"trial {best.number} ({best.value:.4f})"
        )


def _store(study, number: int, batch: list[tuple[int, int]], values: list) -> bool:
    """The batch's scores into the study's record, up to its first failed run, whose why is kept; whether one
    failed."""
    record = stored(study)
    record["study_seed"], scores = study.train_seed, record["scores"].setdefault(str(number), {})
    for (seed, fold), value in zip(batch, values):
        why = study.failure(value)
        if why:
            record["failed"][str(number)] = f"seed {seed}, fold {fold}: {why}"
            break
        scores.setdefault(str(seed), []).append(float(value))
    study.study.set_user_attr(ATTR, record)
    study.record()
    return str(number) in record["failed"]


def _progress(cand: Candidate) -> None:
    """One line per candidate: its trial, each seed's fold mean and the mean over every seed and fold."""
    per_seed = " | ".join(f"seed {s} {sum(v) / len(v):.4f}" for s, v in cand.scores.items() if v)
    end = f"failed ({cand.failed})" if cand.failed else f"mean {cand.mean:.4f}"
    _say(f"seed check: trial {cand.trial.number} | {per_seed} | {end}")


def _say(line: str) -> None:
    print(line, flush=True)
