"""A run's time before its first training step and after its test: ``time/startup_s`` and
``time/teardown_s`` of metrics.json (docs/speed.md, benchmarks/startup.py).

``time/startup_s`` counts from the process's start for ``python train.py`` (the imports, Hydra, the data,
the model and Lightning's setup), and from the job's start for a sweep's job or a ``train(cfg)`` called
from Python, whose process did other things before; ``time/teardown_s`` from the end of the test to the
outputs written.
"""

from __future__ import annotations

import os
import time

import pytorch_lightning as pl

_IMPORTED = time.time()


def process_start() -> float:
    """When this process started, on the ``time.time()`` clock: from ``/proc/self/stat`` (Linux), elsewhere
    when this module was first imported."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime: clock ticks after boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED


def run_start(job_start: float) -> float:
    """Where ``time/startup_s`` counts from: the process's start in a single Hydra run, else ``job_start``."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    single = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.RUN
    return process_start() if single else job_start


class FirstStep(pl.Callback):
    """Notes when the first training batch starts (``at``; None while none has, as in a resume of a finished fit)."""

    def __init__(self):
        self.at: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.at is None:
            self.at = time.time()
