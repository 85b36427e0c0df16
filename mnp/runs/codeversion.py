"""The code version a run's metrics.json records: ``code/commit`` (``git rev-parse HEAD`` of the project's checkout)
and ``code/dirty`` (tracked files changed since that commit); both null outside a git checkout or without git.
``mnp.tools.select`` and ``mnp.tools.report`` say when the runs they pool come from different versions."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def code_version() -> dict:
    """``{"code/commit": sha or None, "code/dirty": bool or None}``, read once per process: the code a process
    runs is the code it imported at its start."""
    top = _git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != ROOT:  # the package installed inside some other repository
        return {"code/commit": None, "code/dirty": None}
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"code/commit": _git("rev-parse", "HEAD"), "code/dirty": None if status is None else bool(status)}
