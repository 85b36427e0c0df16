"""A job's own records reach its run directory only once the job is accepted there.

Hydra 1.3 (``hydra.core.utils.run_job``) writes its record of a job (``.hydra/config.yaml``,
``hydra.yaml``, ``overrides.yaml``) and opens the job log (``train.log``) before the task function
runs: before the run directory's lock is taken and before the job is checked against the run the
directory holds. ``train.yaml`` and ``evaluate.yaml`` therefore point Hydra's record at a folder of this process outside the
run (``hydra.output_subdir: ${mnp_pending_record:}``, :data:`PENDING` + the user and process ids in the temp
folder, so a read-only run directory can still be skipped as done), and :func:`staged` has
Hydra's log files in the run directory hold their lines in memory (:class:`DeferredFileHandler`).
:func:`accept` moves the record into ``.hydra/`` and writes the log once the job is accepted; a job
that stops before (a bad config, a busy directory, a run of another config or other data) or is
skipped as done leaves the directory byte for byte as it was, unless the directory held nothing else:
then the failed job's record and log, with its traceback, are written there.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

PENDING = ".hydra-pending-"

log = logging.getLogger(__name__)


def pending_subdir() -> str:
    """``hydra.output_subdir`` of a job: an absolute folder (Hydra joins it to the run directory) no other
    process uses."""
    return str(Path(tempfile.gettempdir()) / f"{PENDING}{os.getuid()}-{os.getpid()}")


class RunLogFile(logging.FileHandler):
    """Hydra's job log (conf/hydra/job_logging/run_log.yaml): opened without following a
    symbolic link. One planted at its path in a shared run directory is replaced by a regular file, so the job
    never appends its log to a file outside the run (round 5's F06)."""

    def _open(self):
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if "a" in self.mode else os.O_TRUNC)
        try:
            fd = os.open(self.baseFilename, flags, 0o666)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            os.unlink(self.baseFilename)
            fd = os.open(self.baseFilename, flags | os.O_EXCL, 0o666)  # a link planted again meanwhile: refused
        return os.fdopen(fd, self.mode, encoding=self.encoding, errors=self.errors)


class DeferredFileHandler(RunLogFile):
    """A log file written only from :meth:`start` on (the lines held until then go first); after
    :meth:`drop` nothing is written. The file is opened at the first write."""

    def __init__(self, filename, mode: str = "a", encoding=None, errors=None):
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


def _hydra_job() -> tuple[Path, str | None] | None:
    """The Hydra job's output directory and record folder (``hydra.output_subdir``); None outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    return Path(hc.runtime.output_dir).resolve(), hc.output_subdir


def _pending() -> Path | None:
    """This job's staged Hydra record, if Hydra staged one."""
    job = _hydra_job()
    if job is None or not Path(str(job[1] or "")).name.startswith(PENDING):
        return None
    return job[0] / job[1]


def _hold_logs() -> None:
    """Hydra's log files in the job's output directory (plain FileHandlers of the root logger, whatever
    ``hydra/job_logging`` configured) hold their lines from now on."""
    job, root = _hydra_job(), logging.getLogger()
    for h in list(root.handlers) if job else []:
        if type(h) in (logging.FileHandler, RunLogFile) and _unlinked(h).parent == job[0]:
            held = DeferredFileHandler(h.baseFilename, h.mode, h.encoding, h.errors)
            held.setFormatter(h.formatter)
            held.setLevel(h.level)
            held.filters = list(h.filters)
            root.removeHandler(h)
            h.close()
            root.addHandler(held)


def _unlinked(handler: logging.FileHandler) -> Path:
    """The handler's file, its folder resolved but not the file itself (a planted link is the run's own file)."""
    path = Path(handler.baseFilename)
    return path.parent.resolve() / path.name


def _held_logs() -> list[DeferredFileHandler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, DeferredFileHandler) and h.held is not None]


def _untouched() -> bool:
    """The job's directory holds nothing but this job's staged record and its still empty log files: no
    earlier or concurrent job (its record, log, lock, config, metrics or checkpoints) is there to keep."""
    job = _hydra_job()
    if job is None or not job[0].is_dir():
        return False
    logs = {_unlinked(h) for h in _held_logs()}
    return all(
        p.name.startswith(PENDING) or (p in logs and not p.is_symlink() and p.is_file() and p.stat().st_size == 0)
        for p in job[0].iterdir()
    )


def accept() -> None:
    """The job runs in its directory: Hydra's record replaces the one in ``.hydra/``, the log is written."""
    pending = _pending()
    if pending is not None and pending.is_dir():
        record = _hydra_job()[0] / ".hydra"
        record.mkdir(exist_ok=True)
        for f in pending.iterdir():
            shutil.move(f, record / f.name)  # from the temp folder: maybe another file system
        pending.rmdir()
    for handler in _held_logs():
        if os.path.islink(handler.baseFilename):
            log.warning("%s was a symbolic link; it is now a file of this run", handler.baseFilename)
        handler.start()


def staged(fn):
    """``fn(cfg)`` whose job records reach the run directory only through :func:`accept`; on the way
    out, whatever was not accepted is dropped."""

    @functools.wraps(fn)
    def run(cfg, *args, **kwargs):
        _hold_logs()
        try:
            return fn(cfg, *args, **kwargs)
        except BaseException:
            if _untouched():  # a new directory: the failed job's record and log (its traceback) are written
                accept()
            raise
        finally:
            pending = _pending()
            if pending is not None:
                shutil.rmtree(pending, ignore_errors=True)
            for handler in _held_logs():
                handler.drop()

    return run


def finished_record(metrics_path: Path) -> dict | None:
    """A finished run's metrics.json, or None: none there, or one that cannot be read (a crash of an older version
    while writing it), with a warning; the run is then not finished, and its last.ckpt is tested again."""
    try:
        record = json.loads(metrics_path.read_text()) if metrics_path.is_file() else None
    except (OSError, ValueError) as e:
        record = f"cannot be read ({' '.join(str(e).split())[:120]})"
    if record is None or isinstance(record, dict):
        return record
    log.warning(
        "%s %s: the run is not finished; it resumes from its last checkpoint (if any) and is tested again",
        metrics_path,
        record if isinstance(record, str) else f"holds a JSON {type(record).__name__}",
    )
    return None
