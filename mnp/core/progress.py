"""Progress a person can follow: the stage (warm-up or main), the epoch of the whole run and an ETA.

On a terminal the progress bar stays, its description naming the stage and the whole-run ETA
(:class:`RunProgressBar`). When stdout is not a terminal (a log file, a sweep worker, CI) the bar is
replaced by one log line per epoch (:class:`EpochLines`), so ``train.log`` and redirected output show
progress while the run goes.
"""
from __future__ import annotations

import logging
import sys
import time

import pytorch_lightning as pl
from pytorch_lightning.callbacks import TQDMProgressBar

from mnp.core.summary import duration

log = logging.getLogger("mnp.core.progress")


class RunClock:
    """Epoch times per stage, and the whole run's ETA from them."""

    def __init__(self):
        self.start = time.perf_counter()
        self.times: dict[str, list[float]] = {"warm-up": [], "main": []}
        self._epoch_start: float | None = None

    @staticmethod
    def stage(module) -> str:
        in_warmup = getattr(module, "_in_warmup", None)
        return "warm-up" if callable(in_warmup) and in_warmup() else "main"

    @staticmethod
    def warmup_epochs(module) -> int:
        hp = getattr(module, "hparams", {})
        return int(hp.get("warmup_epochs", 0) or 0) if hasattr(hp, "get") else 0

    def epoch_started(self) -> None:
        self._epoch_start = time.perf_counter()

    def epoch_ended(self, stage: str) -> None:
        if self._epoch_start is not None:
            self.times[stage].append(time.perf_counter() - self._epoch_start)
            self._epoch_start = None

    def eta(self, trainer, module, done: int) -> float | None:
        """Seconds left in the whole run after ``done`` epochs: remaining epochs of each stage × that
        stage's mean epoch time (the other stage's mean while a stage has none yet)."""
        total = trainer.max_epochs
        if not total or total < 0:
            return None
        warm = min(self.warmup_epochs(module), total)
        left_warm = max(warm - done, 0)
        left_main = max(total - max(done, warm), 0)
        means = {k: sum(v) / len(v) for k, v in self.times.items() if v}
        if not means:
            return None
        fallback = next(iter(means.values()))
        return left_warm * means.get("warm-up", fallback) + left_main * means.get("main", fallback)


def _loss(trainer) -> str:
    v = trainer.callback_metrics.get("train/loss")
    return f"{float(v):.4g}" if v is not None else "n/a"


class EpochLines(pl.Callback):
    """One log line per training epoch: stage, epoch of total, loss, elapsed time and whole-run ETA."""

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
        log.info("%s epoch %d/%d  loss %s  elapsed %s  ETA %s", stage, trainer.current_epoch + 1, trainer.max_epochs,
                 _loss(trainer), duration(time.perf_counter() - self.clock.start),
                 duration(eta) if eta is not None else "n/a")


class RunProgressBar(TQDMProgressBar):
    """Lightning's bar, described as ``main 12/105 · run ETA 1m10s``."""

    def __init__(self):
        super().__init__()
        self.clock = RunClock()

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self.clock.epoch_started()
        eta = self.clock.eta(trainer, pl_module, trainer.current_epoch)
        stage = self.clock.stage(pl_module)
        text = f"{stage} {trainer.current_epoch + 1}/{trainer.max_epochs}"
        self.train_progress_bar.set_description(text + (f" · run ETA {duration(eta)}" if eta is not None else ""))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.clock.epoch_ended(self.clock.stage(pl_module))
        super().on_train_epoch_end(trainer, pl_module)


def progress_callbacks(enabled: bool, tty: bool | None = None) -> tuple[list[pl.Callback], bool]:
    """The progress callbacks for this run and whether Lightning's own bar stays enabled."""
    if not enabled:
        return [], False
    tty = sys.stdout.isatty() if tty is None else tty
    return ([RunProgressBar()], True) if tty else ([EpochLines()], False)
