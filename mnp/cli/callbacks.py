"""Small Lightning callbacks usable from ``callbacks.extra`` in the config."""

from __future__ import annotations

import time

import pytorch_lightning as pl


class Throttle(pl.Callback):
    """Sleep after every training epoch: slows a demo or a crash-recovery test down to a watchable pace."""

    def __init__(self, seconds: float = 0.5):
        self.seconds = float(seconds)

    def on_train_epoch_end(self, trainer, pl_module):
        time.sleep(self.seconds)
