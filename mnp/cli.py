"""Error handling for the CLIs: one clear line and a non-zero exit, traceback only on request."""
from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("mnp")

# Errors whose message already says what is wrong and what to do.
USER_ERRORS = (ValueError, KeyError, FileNotFoundError, PermissionError, OSError, FloatingPointError)
# Set by :func:`main_guarded` when it (not the user) asked Hydra to re-raise its errors.
_GUARDED = "MNP_CLI_GUARDED"


def full_error_requested() -> bool:
    """The user set HYDRA_FULL_ERROR=1: every error propagates with its full traceback."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1" and os.environ.get(_GUARDED) != "1"


def one_line(e: BaseException) -> str:
    """``e``'s message (and its cause's) on one line; Hydra's option lists become comma-separated."""
    parts, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e).split("Config search path:")[0]  # Hydra appends its search path
        line = ""
        for raw in text.splitlines():
            if not raw.strip() or raw.strip().startswith(("full_key:", "object_type=", "reference_type=")):
                continue
            item = raw.startswith("\t") and not line.endswith(":")  # Hydra's tab-indented option lists
            line += (", " if item else " ") + raw.strip() if line else raw.strip()
        if line:
            parts.append(line)
        e = e.__cause__
    return "; ".join(parts) or "unknown error"


def main_guarded(main) -> None:
    """Run a ``@hydra.main`` entry point; Hydra's own errors (an unknown config key, a missing
    config option, a malformed override) and a sweep's failed job end in one line
    ``error: <message>`` and exit status 1, like the errors :func:`run_guarded` handles."""
    from hydra.errors import HydraException

    from mnp.sweep import JobFailed

    if full_error_requested():
        return main()
    os.environ["HYDRA_FULL_ERROR"] = os.environ[_GUARDED] = "1"  # Hydra re-raises; we print
    try:
        main()
    except (HydraException, JobFailed) as e:
        _fail(one_line(e))


def run_guarded(fn, cfg):
    """Call ``fn(cfg)``; on a user error print ``error: <message>`` and exit 1.

    With HYDRA_FULL_ERROR=1 the exception propagates with its full traceback. In a multirun,
    Hydra records the failed job and the other jobs go on.
    """
    from mnp.sweep import in_multirun, run_job
    if in_multirun():  # failed.json / skipped.json, never SystemExit (it would abort the sweep)
        return run_job(fn, cfg)
    if full_error_requested():
        return fn(cfg)
    try:
        return fn(cfg)
    except USER_ERRORS as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        log.error("%s: %s", type(e).__name__, msg)
        _fail(msg)


def _fail(msg: str) -> None:
    """The CLIs' one way out on an error: ``error: <msg>`` on stderr, exit status 1."""
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)
