"""One tuning study: Optuna's TPE sampler proposes settings, each is scored by k-fold cross-validation on the training
rows, and the study lives in a sqlite file, so a killed study resumes where it stopped.

The budget is ``n_trials`` finished trials (complete, pruned or failed) for every model alike. Trial 0 is the model's
own defaults where the space holds them, so a study never ends below its starting point on the folds. The objective is
the mean over the folds of one validation metric (``val/nll``), declared before the study and the same for every
model. A trial whose running mean after ``prune_after`` folds is worse than the median of the earlier trials at that
fold is pruned (Optuna's MedianPruner). A finished study ends with its seed check (:mod:`.seedcheck`), which chooses
the winner. Jobs run through ``launch``: the Hydra sweeper passes its launcher.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

from mnp.runs.dirname import is_result_key
from mnp.tune import seedcheck
from mnp.tune.records import write_study
from mnp.tune.seedcheck import Launch, SeedCheck
from mnp.tune.space import as_choice, contains, distribution, override_value

log = logging.getLogger("mnp")

# overrides that name the study's subject; with the result keys they make its declaration, while where and how it runs
# (paths.log_dir, launcher, trainer=gpu) may change between sessions: a study started here resumes on a GPU machine
SUBJECT_KEYS = ("model", "dataset", "experiment", "seed")
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


@dataclass
class TuneSettings:
    """The declared budget and rule of a study (``hydra.sweeper`` in conf/hydra/sweeper/mnp_tune.yaml)."""

    n_trials: int = 20
    folds: int = 5
    objective: str = "val/nll"
    direction: str = "minimize"
    seed: int = 0
    n_startup_trials: int = 8
    prune_after: int = 2  # folds a trial runs before it may be pruned; 0: no pruning
    enqueue_defaults: bool = True
    seed_check: SeedCheck = field(default_factory=SeedCheck)  # not part of the declaration a resumed study keeps

    def check(self, train_seed: int = 0) -> None:
        for key, least in (("n_trials", 1), ("folds", 2), ("n_startup_trials", 0), ("prune_after", 0)):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise ValueError(f"hydra.sweeper.{key} must be an integer >= {least}, got {v!r}")
        if self.direction not in ("minimize", "maximize"):
            raise ValueError(f"hydra.sweeper.direction must be minimize or maximize, got {self.direction!r}")
        if not str(self.objective).startswith("val/"):
            raise ValueError(f"hydra.sweeper.objective must be a validation metric (val/...), got {self.objective!r}")
        self.seed_check.check(train_seed)


class Study:
    """A cross-validated Optuna study of ``model`` on ``dataset`` over ``space`` ({config key: sweep expression}),
    stored in ``sweep_dir``; its folds train with ``train_seed`` (the config's ``seed``)."""

    def __init__(
        self,
        settings: TuneSettings,
        space: dict[str, Any],
        sweep_dir: Path,
        model: str,
        dataset: str,
        fixed: Sequence[str] = (),
        defaults: dict[str, Any] | None = None,
        base_epochs: int | None = None,
        train_seed: int = 0,
    ):
        settings.check(train_seed)
        self.settings, self.sweep_dir, self.fixed, self.train_seed = settings, Path(sweep_dir), list(fixed), train_seed
        self.model, self.dataset, self.name = model, dataset, f"{model}_{dataset}"
        self.dists: dict[str, BaseDistribution] = {k: distribution(k, v, base_epochs) for k, v in space.items()}
        if not self.dists:
            raise ValueError("the search space is empty: declare it in conf/tune_space/<model>.yaml")
        self.defaults = {k: v for k, v in (defaults or {}).items() if k in self.dists and contains(self.dists[k], v)}
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        self.storage = f"sqlite:///{(self.sweep_dir / 'study.db').resolve()}"
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(
            study_name=self.name,
            storage=self.storage,
            direction=settings.direction,
            load_if_exists=True,
            sampler=self._sampler(),
            pruner=optuna.pruners.MedianPruner(
                n_startup_trials=settings.n_startup_trials, n_warmup_steps=max(settings.prune_after - 1, 0)
            ),
        )
        self._check_declaration()

    # ------------------------------------------------------------------ set-up
    def _sampler(self) -> optuna.samplers.BaseSampler:
        """TPE seeded from the study seed and the trials already stored: a resumed study draws new points instead of
        repeating the random start-up draws of the first session."""
        done = 0
        try:
            done = len(optuna.load_study(study_name=self.name, storage=self.storage).trials)
        except KeyError:  # a new study
            pass
        return optuna.samplers.TPESampler(
            seed=self.settings.seed + done, n_startup_trials=self.settings.n_startup_trials, multivariate=True
        )

    def _check_declaration(self) -> None:
        """A stored study keeps its declared space, folds and objective: resuming with others would mix two studies."""
        declared = {
            "space": {k: repr(d) for k, d in sorted(self.dists.items())},
            "folds": self.settings.folds,
            "objective": self.settings.objective,
            "direction": self.settings.direction,
            "fixed": declared_fixed(self.fixed),
        }
        stored = self.study.user_attrs.get("declaration")
        if stored is None:
            self.study.set_user_attr("declaration", declared)
            if self.settings.enqueue_defaults and self.defaults:
                self.study.enqueue_trial({k: as_choice(self.dists[k], v) for k, v in self.defaults.items()})
            return
        stored = {**stored, "fixed": declared_fixed(stored.get("fixed", []))}  # older records kept every override
        changed = sorted(k for k in declared if stored.get(k) != declared[k])
        if changed:
            raise ValueError(
                f"{self.sweep_dir / 'study.db'} holds study {self.name!r} declared with another {', '.join(changed)}; "
                "a study keeps one declaration: give a new experiment_name (or remove the study) to start another"
            )

    # ------------------------------------------------------------------ the loop
    def finished(self) -> list[optuna.trial.FrozenTrial]:
        return [t for t in self.study.trials if t.state in FINISHED and not t.user_attrs.get("requeued")]

    def requeue_unfinished(self) -> None:
        """Trials left running by a killed session are failed and asked again with the same settings; their
        finished folds are found in their run directories and not trained again."""
        for t in self.study.trials:
            if t.state == TrialState.RUNNING:
                self.study._storage.set_trial_user_attr(
                    t._trial_id, "requeued", True
                )  # no public setter on a stored trial
                self.study.tell(t.number, state=TrialState.FAIL)
                self.study.enqueue_trial(t.params, skip_if_exists=False)

    def run(self, launch: Launch, parallel_folds: bool = False) -> None:
        self.requeue_unfinished()
        total = self.settings.n_trials
        while len(self.finished()) < total:
            trial = self.study.ask(self.dists)
            overrides = [f"{k}={override_value(self.dists[k], trial.params[k])}" for k in self.dists]
            trial.set_user_attr("overrides", overrides)
            scores, state, why = self._folds(trial, overrides, launch, parallel_folds)
            if state == TrialState.COMPLETE:
                self.study.tell(trial, sum(scores) / len(scores))
            else:
                self.study.tell(trial, state=state)
            self._progress(trial.number, overrides, scores, state, why)
            self.record()
        self.record()
        seedcheck.run(self, launch, parallel_folds)

    def record(self) -> None:
        write_study(self)

    def fold_job(self, overrides: Sequence[str], fold: int, seed: int | None = None) -> list[str]:
        """One fold run's overrides; ``seed``: another training seed (the seed check), the folds staying the same."""
        fixed = self.fixed if seed is None else [o for o in self.fixed if o.split("=", 1)[0].lstrip("+~") != "seed"]
        return [*fixed, *overrides, f"dataset.cv_fold={fold}", *([f"seed={seed}"] if seed is not None else [])]

    def failure(self, value: Any) -> str:
        """Why a fold job's outcome is no score ("" when it is one): its exception, or a value that is not finite."""
        if isinstance(value, BaseException):
            return str(value)
        return "" if _finite(value) else f"{self.settings.objective} = {value}"

    def _folds(self, trial, overrides: list[str], launch: Launch, parallel: bool):
        """The trial's fold scores, and its state (complete, pruned or failed, with why)."""
        s, scores = self.settings, []
        jobs = [self.fold_job(overrides, f) for f in range(s.folds)]
        batches = [jobs] if parallel or not s.prune_after else [[j] for j in jobs]
        for batch in batches:
            for value in launch(batch):
                if self.failure(value):
                    trial.set_user_attr("fold_scores", scores)
                    return scores, TrialState.FAIL, f"fold {len(scores)}: {self.failure(value)}"
                scores.append(float(value))
                trial.report(sum(scores) / len(scores), len(scores) - 1)
            trial.set_user_attr("fold_scores", scores)
            if s.prune_after and len(scores) >= s.prune_after and len(scores) < s.folds and trial.should_prune():
                return scores, TrialState.PRUNED, f"after {len(scores)} folds"
        return scores, TrialState.COMPLETE, ""

    def _progress(self, number: int, overrides: list[str], scores: list[float], state, why: str) -> None:
        """One line per trial: number, settings, fold scores, mean and the best so far."""
        done = len(self.finished())
        folds = " ".join(f"{v:.4f}" for v in scores) or "-"
        mean = f"mean {sum(scores) / len(scores):.4f}" if scores else ""
        status = {
            TrialState.COMPLETE: mean,
            TrialState.PRUNED: f"pruned {why}, {mean}",
            TrialState.FAIL: f"failed ({why})",
        }[state]
        try:
            best = f"best {self.study.best_value:.4f} (trial {self.study.best_trial.number})"
        except ValueError:  # no complete trial yet
            best = "best -"
        line = f"trial {number} ({done}/{self.settings.n_trials}) {' '.join(overrides)} | folds {folds} | {status} | {best}"
        print(line, flush=True)
        log.info("%s", line)


def declared_fixed(fixed: Sequence[str]) -> list[str]:
    """The fixed overrides a study is declared with, sorted: its subject and whatever can change a result."""
    keys = [(o.split("=", 1)[0].lstrip("+~"), o) for o in fixed]
    return sorted(o for k, o in keys if k in SUBJECT_KEYS or is_result_key(k))


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
