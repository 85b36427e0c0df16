"""Progress a person can follow: the stage (warm-up or main), the epoch of the whole run, what the epoch
learned and an ETA.

What it learned (:func:`learning`): the train accuracy and the classification loss come before the total
loss, which for MNP is nearly all L_RBF (orders of magnitude above the classification loss L_TY, so it
hides whether the classifier learns); MNP's warm-up trains L_RBF alone and says so.

On a terminal the progress bar stays, its description naming the stage and the whole-run ETA, its postfix
what was learned (:class:`RunProgressBar`). When stdout is not a terminal (a log file, a sweep worker, CI)
the bar is replaced by one log line per epoch (:class:`EpochLines`), so ``train.log`` and redirected output
show progress while the run goes.
"""

from __future__ import annotations

import logging
import sys
import time

import pytorch_lightning as pl
from pytorch_lightning.callbacks import TQDMProgressBar

from mnp.runs.summary import duration

log = logging.getLogger("mnp.cli.progress")


# A main epoch of MNP costs about this many warm-up epochs (the classifier's loss and the context memory update
# on top of L_RBF): 7.5-14.8× on cub, handwritten, pie and scene15 (benchmarks/bench_cpu.md, paper_main sweep
# estimate), geometric mean 10.8. The ETA uses it until a main epoch has been timed; the warm-up's own mean put
# the whole-run ETA 7-15× too short.
MAIN_OVER_WARMUP = 11.0


class RunClock:
    """Epoch times per stage, and the whole run's ETA from them."""

    def __init__(self):
        self.start = time.perf_counter()
        self.times: dict[str, list[float]] = {"warm-up": [], "main": []}
        self._epoch_start: float | None = None

    @staticmethod
    def stage(module) -> str:
        in_warmup = getattr(module, "in_warmup", None)
        return "warm-up" if callable(in_warmup) and in_warmup() else "main"

    @staticmethod
    def warmup_epochs(module) -> int:
        spec = getattr(module, "spec", None)  # MNP's parts (mnp.model.parts); the other models have no warm-up
        return int(spec.warmup.epochs) if spec is not None else 0

    def epoch_started(self) -> None:
        self._epoch_start = time.perf_counter()

    def epoch_ended(self, stage: str) -> None:
        if self._epoch_start is not None:
            self.times[stage].append(time.perf_counter() - self._epoch_start)
            self._epoch_start = None

    def eta(self, trainer, module, done: int) -> float | None:
        """Seconds left in the whole run after ``done`` epochs: remaining epochs of each stage × that
        stage's mean epoch time; while a stage has none yet, the other's scaled by :data:`MAIN_OVER_WARMUP`."""
        total = trainer.max_epochs
        if not total or total < 0:
            return None
        warm = min(self.warmup_epochs(module), total)
        left_warm = max(warm - done, 0)
        left_main = max(total - max(done, warm), 0)
        means = {k: sum(v) / len(v) for k, v in self.times.items() if v}
        if not means:
            return None
        warm_s = means.get("warm-up", means.get("main", 0.0) / MAIN_OVER_WARMUP)
        main_s = means.get("main", means.get("warm-up", 0.0) * MAIN_OVER_WARMUP)
        return left_warm * warm_s + left_main * main_s


# (logged key, label, format) in display order: train/ty is MNP's classification loss L_TY (eq. 14)
LEARNING = (("train/acc", "train acc", ".3f"), ("train/ty", "class loss", ".4g"), ("train/loss", "loss", ".4g"))
WARMUP_NOTE = " (L_RBF only)"  # MNP's warm-up: the contrastive loss alone, no classifier yet


def learning(metrics) -> dict[str, str]:
    """The last epoch's train accuracy, classification loss and total loss, those logged, as text by label."""
    return {label: format(float(metrics[key]), fmt) for key, label, fmt in LEARNING if metrics.get(key) is not None}


def note(stage: str) -> str:
    return WARMUP_NOTE if stage == "warm-up" else ""


class EpochLines(pl.Callback):
    """One log line per training epoch: stage, epoch of total, train accuracy, classification and total loss,
    elapsed time and whole-run ETA."""

    def __init__(self):
        self.clock = RunClock()

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.clock.epoch_started()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        stage = self.clock.stage(pl_module)
        self.clock.epoch_ended(stage)
        if not trainer.is_global_zero:
            return
        eta = self.clock.eta(trainer, pl_module, trainer.current_epoch + 1)
        learned = "  ".join(f"{k} {v}" for k, v in learning(trainer.callback_metrics).items()) or "loss n/a"
        log.info(
            "%s epoch %d/%d%s  %s  elapsed %s  ETA %s",
            stage,
            trainer.current_epoch + 1,
            trainer.max_epochs,
            note(stage),
            learned,
            duration(time.perf_counter() - self.clock.start),
            duration(eta) if eta is not None else "n/a",
        )


class RunProgressBar(TQDMProgressBar):
    """Lightning's bar, described as ``main 12/105 · run ETA 1m10s`` (``warm-up 3/105 (L_RBF only) · ...``), with
    the train accuracy, classification loss and loss as its postfix."""

    def __init__(self):
        super().__init__()
        self.clock = RunClock()

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self.clock.epoch_started()
        eta = self.clock.eta(trainer, pl_module, trainer.current_epoch)
        stage = self.clock.stage(pl_module)
        text = f"{stage} {trainer.current_epoch + 1}/{trainer.max_epochs}{note(stage)}"
        self.train_progress_bar.set_description(text + (f" · run ETA {duration(eta)}" if eta is not None else ""))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.clock.epoch_ended(self.clock.stage(pl_module))
        super().on_train_epoch_end(trainer, pl_module)

    def get_metrics(self, trainer, pl_module) -> dict:
        """What was learned, then the other progress-bar metrics (``val/acc``); no version number."""
        shown = {key for key, _, _ in LEARNING}
        rest = {k: v for k, v in super().get_metrics(trainer, pl_module).items() if k not in shown and k != "v_num"}
        return {**learning(trainer.callback_metrics), **rest}


def progress_callbacks(enabled: bool, tty: bool | None = None) -> tuple[list[pl.Callback], bool]:
    """The progress callbacks for this run and whether Lightning's own bar stays enabled."""
    if not enabled:
        return [], False
    tty = sys.stdout.isatty() if tty is None else tty
    return ([RunProgressBar()], True) if tty else ([EpochLines()], False)
