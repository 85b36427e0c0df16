"""The tuning study's seed check (docs/tuning.md): the best trials' folds, trained again at other seeds, choose
the winner; a candidate that diverges or fails there loses, trial 0 can win, and a check killed midway resumes
without training a finished fold again (the study itself: tests/test_tuning.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from test_tuning import by_lr, fake_launch, make_study, read_csv

from mnp.runs.signals import Terminated
from mnp.tune.apply import apply
from mnp.tune.seedcheck import SeedCheck


# ---------------------------------------------------------------------------- the seed check
def ranked(study):
    """The study's complete trials, best first."""
    return sorted((t for t in study.study.trials if t.state.name == "COMPLETE"), key=lambda t: (t.value, t.number))


def lr_of(trial):
    """The learning rate a trial's jobs were given (its override, 4 significant digits)."""
    return float(dict(o.split("=") for o in trial.user_attrs["overrides"])["model.optim.lr"])


def test_a_candidate_whose_other_seeds_diverge_loses_to_a_stable_one_when_the_finished_study_is_rerun(tmp_path):
    """The study runs without its check; re-run with the check on (not part of its declaration), it trains the
    three best trials' folds at seeds 1 and 2: the study's best collapses at seed 1, so the second best wins."""
    first = make_study(tmp_path, seed_check=SeedCheck(candidates=0))
    first.run(fake_launch(by_lr, []))
    assert yaml.safe_load((first.sweep_dir / "best.yaml").read_text())["chosen_by"] == "the study (seed check off)"
    top = ranked(first)[:3]
    lr = {t.number: lr_of(t) for t in top}

    def scores(x, fold, seed):  # the study's best reaches chance (log 10) on two folds at seed 1
        unstable = seed == 1 and fold < 2 and x == lr[top[0].number]
        return math.log(10) if unstable else by_lr(x, fold)

    calls = []
    again = make_study(tmp_path, seed_check=SeedCheck(seeds=[1, 2], candidates=3))
    again.run(fake_launch(scores, calls))
    assert len(again.finished()) == 6 and len(calls) == 3 * 2 * 3  # no trial again: the check only
    assert sorted({(c[-1], c[-2]) for c in calls}) == sorted(
        {(f"seed={s}", f"dataset.cv_fold={f}") for s in (1, 2) for f in range(3)}
    )
    expected = {}
    for t in top:
        values = [scores(lr[t.number], f, s) for s in (0, 1, 2) for f in range(3)]
        expected[t.number] = np.mean(values)
    winner = min(top, key=lambda t: expected[t.number])
    assert winner.number == top[1].number  # the stable second best
    best = yaml.safe_load((again.sweep_dir / "best.yaml").read_text())
    assert best["trial"] == winner.number and best["chosen_by"] == "seed check (seeds 0, 1, 2; 3 candidates)"
    assert best["mean"] == pytest.approx(expected[winner.number], rel=1e-5)
    assert best["fold_scores"][1] == pytest.approx([by_lr(lr[winner.number], f) for f in range(3)], rel=1e-5)
    assert best["overrides"] == winner.user_attrs["overrides"] and best["seed_check_runs_to_go"] == 0
    assert [c["trial"] for c in best["candidates"]] == [t.number for t in top]
    assert best["study_best"]["trial"] == top[0].number and best["study_best"]["mean"] == pytest.approx(
        top[0].value, rel=1e-5
    )
    rows = read_csv(again.sweep_dir)
    checks = [r for r in rows if r["state"] == "seed check"]
    assert [(int(r["trial"]), int(r["seed"])) for r in checks] == [(t.number, s) for t in top for s in (1, 2)]
    unstable = next(r for r in checks if int(r["trial"]) == top[0].number and r["seed"] == "1")
    assert [float(v) for v in unstable["fold_scores"].split()][:2] == pytest.approx([math.log(10)] * 2, rel=1e-5)
    chosen = [r for r in rows if r["chosen"] == "True"]
    assert [int(r["trial"]) for r in chosen] == [winner.number] and chosen[0]["seed"] == "0"
    assert float(chosen[0]["seeds_mean"]) == pytest.approx(expected[winner.number], rel=1e-5)


def test_trial_0_can_win_and_a_candidate_whose_run_fails_is_out(tmp_path):
    """Three trials, all candidates: the defaults (lr 1e-2) are the worst at seed 0 but the only ones stable at
    seed 1; one other candidate's run fails there, and its remaining runs are not trained."""
    defaults = 1e-2

    def scores(x, fold, seed):
        if seed == 0 or x == defaults:
            return by_lr(x, fold)
        return RuntimeError("diverged") if x == failing else 5.0

    failing = None
    study = make_study(tmp_path, n_trials=3, seed_check=SeedCheck(candidates=0))
    study.run(fake_launch(scores, []))
    top = ranked(study)
    assert top[-1].number == 0 and len(top) == 3  # the defaults: the study's worst
    failing = lr_of(top[0])
    calls = []
    again = make_study(tmp_path, n_trials=3, seed_check=SeedCheck(seeds=[1, 2], candidates=3))
    again.run(fake_launch(scores, calls))
    assert sum(c[1] == f"model.optim.lr={failing:.4g}" for c in calls) == 1  # its first run fails: no other is trained
    assert len(calls) == 1 + 2 * 2 * 3
    best = yaml.safe_load((again.sweep_dir / "best.yaml").read_text())
    assert best["trial"] == 0 and best["chosen_by"] == "seed check (seeds 0, 1, 2; 3 candidates)"
    assert best["mean"] == pytest.approx(np.mean([by_lr(defaults, f) for f in range(3)]), rel=1e-5)
    assert best["candidates"][0] == {"trial": top[0].number, "mean": None, "failed": "seed 1, fold 0: diverged"}
    assert best["candidates"][1]["mean"] == pytest.approx(
        np.mean([by_lr(lr_of(top[1]), f) for f in range(3)] + [5.0] * 6), rel=1e-5
    )
    failed = [r for r in read_csv(again.sweep_dir) if r["state"] == "seed check failed"]
    assert [(int(r["trial"]), r["seed"], r["folds_done"]) for r in failed] == [(top[0].number, "1", "0")]


class RunDirs:
    """Fold jobs as ``skip_if_done`` runs them: a finished job's score is read back, not trained again; the session
    is killed (SIGTERM) once ``kill_after`` seed-check runs have trained."""

    def __init__(self):
        self.done, self.trained, self.kill_after = {}, [], None

    def launch(self, batch):
        out = []
        for job in batch:
            key = tuple(job)
            if key not in self.done:
                if self.kill_after is not None and sum("seed=" in " ".join(j) for j in self.trained) >= self.kill_after:
                    raise Terminated("terminated by SIGTERM")
                self.trained.append(key)
                kv = dict(j.split("=", 1) for j in job)
                self.done[key] = by_lr(float(kv["model.optim.lr"]), int(kv["dataset.cv_fold"])) + 0.1 * int(
                    kv.get("seed", 0)
                )
            out.append(self.done[key])
        return out


@pytest.mark.parametrize("parallel", [False, True])
def test_a_check_killed_midway_resumes_without_training_a_finished_fold_again(tmp_path, parallel):
    runs = RunDirs()
    runs.kill_after = 4  # one at a time: inside the first candidate's seed 2; together: inside its batch of six
    with pytest.raises(Terminated):
        make_study(tmp_path, n_trials=3).run(runs.launch, parallel_folds=parallel)
    stored = make_study(tmp_path, n_trials=3).study.user_attrs.get("seed_check", {}).get("scores", {})
    recorded = sum(map(len, (v for t in stored.values() for v in t.values())))
    assert recorded == (0 if parallel else 4)  # one at a time, each run is stored as it ends
    to_go = 3 * 2 * 3 - recorded
    assert (
        f"# chosen_by: the study (its seed check is unfinished: {to_go} fold runs to go)"
        in (tmp_path / "s" / "trials.csv").read_text()
    )
    with pytest.raises(ValueError) as refused:  # the study's budget is spent, its check is not
        apply(tmp_path / "s", tmp_path / "results", tmp_path / "conf")
    assert str(refused.value) == (
        f"{tmp_path / 's'}: its seed check is not finished ({to_go} fold runs to go); finish it with: "
        "python train.py -m model=mlp"
    )
    assert not (tmp_path / "results").exists()
    runs.kill_after = None
    again = make_study(tmp_path, n_trials=3)
    again.run(runs.launch, parallel_folds=parallel)
    assert len(runs.trained) == len(set(runs.trained)) == 3 * 3 + 3 * 2 * 3  # every run trained once
    best = yaml.safe_load((again.sweep_dir / "best.yaml").read_text())
    assert best["chosen_by"] == "seed check (seeds 0, 1, 2; 3 candidates)"
    lr = float(best["overrides"][0].split("=")[1])
    assert best["mean"] == pytest.approx(
        np.mean([by_lr(lr, f) + 0.1 * s for s in (0, 1, 2) for f in range(3)]), rel=1e-4
    )
