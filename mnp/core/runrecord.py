"""A job's own records reach its run directory only once the job is accepted there.

Hydra 1.3 (``hydra.core.utils.run_job``) writes its record of a job (``.hydra/config.yaml``,
``hydra.yaml``, ``overrides.yaml``) and opens the job log (``train.log``) before the task function
runs: before the run directory's lock is taken and before the job is checked against the run the
directory holds. ``train.yaml`` therefore points Hydra's record at a folder of this process
(``hydra.output_subdir: ${mnp_pending_record:}``, :data:`PENDING` + the PID) and its log file at a
:class:`DeferredFileHandler`, which holds the records in memory. :func:`accept` moves the record into
``.hydra/`` and starts the log once the job is accepted; a job that stops before (a bad config, a busy
directory, a run of another config or other data) or is skipped as done leaves the directory byte for
byte as it was (:func:`staged`).
"""
from __future__ import annotations

import functools
import logging
import os
import shutil
from pathlib import Path

PENDING = ".hydra-pending-"


def pending_subdir() -> str:
    """``hydra.output_subdir`` of a train job: a name no other process uses."""
    return f"{PENDING}{os.getpid()}"


class DeferredFileHandler(logging.FileHandler):
    """Hydra's job log file, written only from :meth:`start` on (the records held until then go first);
    after :meth:`drop` nothing is written. The file is opened (created) at the first write."""

    def __init__(self, filename, mode: str = "a", encoding=None, delay: bool = True, errors=None):
        super().__init__(filename, mode, encoding, delay=True, errors=errors)
        self.held: list[logging.LogRecord] | None = []
        self.dropped = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.held is not None:
            self.held.append(record)
        elif not self.dropped:
            super().emit(record)

    def start(self) -> None:
        held, self.held = self.held or [], None
        for record in held:
            super().emit(record)

    def drop(self) -> None:
        self.held, self.dropped = None, True


def _pending() -> Path | None:
    """This job's staged Hydra record, if Hydra staged one."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if not str(hc.output_subdir or "").startswith(PENDING):
        return None
    return Path(hc.runtime.output_dir) / hc.output_subdir


def _held_logs() -> list[DeferredFileHandler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, DeferredFileHandler) and h.held is not None]


def accept() -> None:
    """The job runs in its directory: Hydra's record replaces the one in ``.hydra/``, the log starts."""
    pending = _pending()
    if pending is not None and pending.is_dir():
        record = pending.with_name(".hydra")
        record.mkdir(exist_ok=True)
        for f in pending.iterdir():
            os.replace(f, record / f.name)
        pending.rmdir()
    for handler in _held_logs():
        handler.start()


def staged(fn):
    """``fn(cfg)`` whose job records reach the run directory only through :func:`accept`; on the way
    out, whatever was not accepted is dropped."""
    @functools.wraps(fn)
    def run(cfg, *args, **kwargs):
        try:
            return fn(cfg, *args, **kwargs)
        finally:
            pending = _pending()
            if pending is not None:
                shutil.rmtree(pending, ignore_errors=True)
            for handler in _held_logs():
                handler.drop()
    return run
