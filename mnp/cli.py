"""Error handling for the CLIs: one clear line and a non-zero exit, traceback only on request."""
from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("mnp")

# Errors whose message already says what is wrong and what to do.
USER_ERRORS = (ValueError, KeyError, FileNotFoundError, PermissionError, OSError, FloatingPointError)


def run_guarded(fn, cfg):
    """Call ``fn(cfg)``; on a user error print ``error: <message>`` and exit 1.

    With HYDRA_FULL_ERROR=1 the exception propagates with its full traceback. In a multirun,
    Hydra records the failed job and the other jobs go on.
    """
    from mnp.sweep import in_multirun, run_job
    if in_multirun():  # failed.json / skipped.json, never SystemExit (it would abort the sweep)
        return run_job(fn, cfg)
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        return fn(cfg)
    try:
        return fn(cfg)
    except USER_ERRORS as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: {msg}", file=sys.stderr)
        log.error("%s: %s", type(e).__name__, msg)
        sys.exit(1)
