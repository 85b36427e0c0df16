"""SIGTERM (``kill``, a scheduler's stop, a container's stop): the run stops at a safe point, keeps its
resumable ``last.ckpt`` and exits with status 143 and one line saying where to resume. Ctrl-C (SIGINT) ends
the same way with status 130: Lightning ends ``fit`` on a ``KeyboardInterrupt`` with ``sys.exit(1)``, which
:func:`resumable` turns into :class:`Interrupted`.

While a Trainer runs, Lightning's own handler notes the signal and raises ``SIGTERMException`` at the next
batch or epoch end; that exception is a ``SystemExit`` with status 0, so it is turned into
:class:`Terminated` here. Outside the Trainer (setup, between the jobs of a sweep), :func:`handled`'s
handler raises :class:`Terminated` at once, after it has passed SIGTERM on to the workers of a parallel sweep
(:func:`end_children`), so none is left behind. A sweep stops, and its summary names the interrupted jobs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

EXIT_CODE = 128 + signal.SIGTERM  # 143: what a shell reports for a process ended by SIGTERM
SIGTERM, CTRL_C = "terminated by SIGTERM", "interrupted by Ctrl-C"
CONTINUE = "; re-run the same command to continue (training resumes from checkpoints/last.ckpt)"
MAIN_PID = "MNP_MAIN_PID"  # the process the user started; a sweep's workers inherit it
GRACE_S = 10.0  # how long a sweep's workers get to record their jobs and end before they are killed


class Terminated(BaseException):
    """The process got SIGTERM. Not an ``Exception``: a sweep's launcher must stop, not start the next job."""

    exit_code = EXIT_CODE


class Interrupted(Terminated):
    """The user pressed Ctrl-C (SIGINT)."""

    exit_code = 128 + signal.SIGINT  # 130


def stopped(e: BaseException) -> Terminated:
    """What ``e`` (:class:`Terminated`, a bare ``SIGTERMException`` of ``evaluate.py``'s test loop, or a
    ``KeyboardInterrupt`` outside the Trainer) means, with its one line and exit status."""
    if isinstance(e, Terminated) and str(e):
        return e
    if isinstance(e, (Interrupted, KeyboardInterrupt)):
        return Interrupted(CTRL_C + CONTINUE)
    return Terminated(SIGTERM + CONTINUE)


@contextlib.contextmanager
def handled():
    """SIGTERM raises :class:`Terminated` in this (main) process while the block runs."""
    if threading.current_thread() is not threading.main_thread():  # Python runs signal handlers there only
        yield
        return
    before, os.environ[MAIN_PID] = signal.signal(signal.SIGTERM, _on_sigterm), str(os.getpid())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _on_sigterm(signum, frame) -> None:
    if signal.getsignal(signal.SIGTERM) is not _on_sigterm:
        return  # called from Lightning's handler, which a running Trainer installed: it stops at the next batch
    end_children()
    raise Terminated(SIGTERM + CONTINUE)


def _parent(pid: int) -> int | None:
    """The parent pid of a live process (``/proc/<pid>/stat``); None when it is gone or a zombie."""
    try:
        state, ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:2]
    except (OSError, IndexError, ValueError):
        return None
    return None if state in "ZX" else int(ppid)


def _ignores_sigterm(pid: int) -> bool:
    try:
        line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("SigIgn:"))
    except (OSError, StopIteration):
        return True
    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


def end_children(grace: float = GRACE_S) -> None:
    """Pass SIGTERM on to this process's children (a parallel sweep's workers: each records its job as
    interrupted and ends), wait up to ``grace`` seconds, then SIGKILL those left. Children that ignore
    SIGTERM (resource trackers, which end with this process) are left alone. Needs ``/proc`` (Linux)."""
    me = os.getpid()
    pids = [int(d.name) for d in Path("/proc").glob("[0-9]*") if _parent(int(d.name)) == me]
    pids = [pid for pid in pids if not _ignores_sigterm(pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        end = time.monotonic() + grace
        while time.monotonic() < end and (pids := [pid for pid in pids if _parent(pid) is not None]):
            time.sleep(0.05)
        if not pids:
            return


def resume_message(stage: str, ckpt_dir: Path, max_epochs: int, cause: str = SIGTERM) -> str:
    """What was interrupted (``cause``: SIGTERM or Ctrl-C) and what the same command will do next, from the
    ``last.ckpt`` that is kept."""
    from mnp.runs.checkpointing import LAST, CheckpointError, safe_load

    last = Path(ckpt_dir) / LAST
    try:
        done = int(safe_load(last).get("epoch", -1)) + 1
    except (CheckpointError, FileNotFoundError):
        return f"{cause} during {stage}, before any checkpoint was written; re-run the same command to start again"
    if done >= max_epochs:
        return (
            f"{cause} during {stage}; re-run the same command to test the trained model ({last} holds all "
            f"{done} epochs)"
        )
    held = "epoch 1" if done == 1 else f"epochs 1-{done}"
    return (
        f"{cause} during {stage}; re-run the same command to resume from epoch {done + 1} of {max_epochs} "
        f"({last} holds {held})"
    )


@contextlib.contextmanager
def resumable(trainer, ckpt_dir: Path):
    """Around ``trainer.fit`` and ``trainer.test``: SIGTERM ends in :class:`Terminated`, Ctrl-C in
    :class:`Interrupted`, each naming the epoch to resume from."""
    from pytorch_lightning.trainer.states import TrainerFn
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    def where(cause: str) -> str:
        stage = "testing" if trainer.state.fn == TrainerFn.TESTING else "training"
        return resume_message(stage, ckpt_dir, int(trainer.max_epochs), cause)

    try:
        yield
    except (SIGTERMException, Terminated) as e:
        raise (Interrupted(where(CTRL_C)) if isinstance(e, Interrupted) else Terminated(where(SIGTERM))) from None
    except (KeyboardInterrupt, SystemExit) as e:  # Lightning ends a Ctrl-C in fit or test with sys.exit(1)
        if isinstance(e, SystemExit) and not trainer.interrupted:
            raise
        raise Interrupted(where(CTRL_C)) from None


EVALUATION = " during the evaluation; nothing was written: re-run the same command to evaluate again"


@contextlib.contextmanager
def evaluating():
    """Around evaluate.py's work: SIGTERM ends in :class:`Terminated`, Ctrl-C in :class:`Interrupted`, each with a
    line for an evaluation (there is no training to resume)."""
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    try:
        yield
    except (SIGTERMException, Terminated, KeyboardInterrupt) as e:
        ctrl_c = isinstance(e, (Interrupted, KeyboardInterrupt))
        raise (Interrupted(CTRL_C + EVALUATION) if ctrl_c else Terminated(SIGTERM + EVALUATION)) from None
    except SystemExit as e:  # Lightning ends a Ctrl-C in the test with sys.exit(1), silently
        if isinstance(e.__context__, KeyboardInterrupt):
            raise Interrupted(CTRL_C + EVALUATION) from None
        raise


def stop_if_worker() -> None:
    """In a worker process of a parallel sweep (not the process the user started), end it as SIGTERM does:
    its job is recorded as interrupted, and its launcher must not hand it another job."""
    if os.environ.get(MAIN_PID, str(os.getpid())) == str(os.getpid()):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
