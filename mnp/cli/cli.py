"""Error handling for the CLIs: one clear line and a non-zero exit, traceback only on request."""

from __future__ import annotations

import gc
import logging
import os
import re
import sys
import tempfile
from pathlib import Path

from mnp.cli.console import quiet, to_log_file, traceback_to_log_file
from mnp.cli.errors import USER_ERRORS
from mnp.runs import signals
from mnp.runs.migrations import moved_key
from mnp.runs.summary import STATUS_ENV, sweep_incomplete, sweep_summary

log = logging.getLogger("mnp")

RUN_DIR_KEYS = "paths.log_dir or hydra.run.dir"  # what moves a train job's run directory
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


def main_guarded(main, evaluation: bool = False) -> None:
    """Run a ``@hydra.main`` entry point; Hydra's own errors (an unknown config key, a missing
    config option, a malformed override), a sweep's failed job and a sweep with skipped jobs end in one
    line ``error: <message>`` and exit status 1, like the errors :func:`run_guarded` handles; SIGTERM
    and Ctrl-C end in one line and exit status 143 and 130 (:mod:`mnp.runs.signals`). ``evaluation``: evaluate.py's,
    whose folder moves with ``output_dir``."""
    quiet()
    multirun = any(a in ("-m", "--multirun") for a in sys.argv[1:])
    sys.argv[1:] = [quote_path_value(a, multirun) for a in sys.argv[1:]]
    status = Path(tempfile.mkstemp(prefix="mnp-sweep-", suffix=".jsonl")[1])
    os.environ[STATUS_ENV] = str(status)  # the jobs of a sweep append their outcomes (inherited by workers)
    try:
        with signals.handled():
            _run_main(main, status, evaluation)
    finally:
        status.unlink(missing_ok=True)
        # the interpreter's last garbage collection at exit walks every object of torch, Lightning and the
        # run: 1-3 s on a busy 2-core machine (benchmarks/startup_cpu.json); frozen objects are left to the OS
        gc.freeze()


def _run_main(main, status: Path, evaluation: bool = False) -> None:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from mnp.cli.sweep import JobFailed

    if full_error_requested():
        return main()
    os.environ["HYDRA_FULL_ERROR"] = os.environ[_GUARDED] = "1"  # Hydra re-raises; we print
    try:
        main()
    except (signals.Terminated, KeyboardInterrupt) as e:  # a sweep stops at once; its summary names the interrupted job
        _print_sweep(status)
        stop = signals.stopped(e)
        _fail(str(stop), stop.exit_code)
    except (HydraException, JobFailed) as e:
        _print_sweep(status)
        _fail(not_a_model_key(one_line(e)))
    except OSError as e:  # Hydra creates the run directory (and saves its config) before the job runs
        where = f" {e.filename}" if e.filename else ""
        folder, key = ("the evaluation folder", "output_dir") if evaluation else ("the run directory", RUN_DIR_KEYS)
        _fail(f"cannot create {folder}{where}: {e.strerror or e}; set {key} to a writable place")
    except OmegaConfBaseException as e:  # e.g. a ??? value that Hydra's own config (hydra.run.dir) needs
        found = re.search(r"Missing mandatory value: ([\w.]+)", str(e))
        line = re.sub(r"^\w+ raised while resolving interpolation: ", "", one_line(e))  # a resolver's refusal
        _fail(f"{found.group(1)} is required: add {found.group(1)}=<value> to the command" if found else line)
    _print_sweep(status)
    if sweep_incomplete(status):  # skipped jobs: the sweep ran, but its results are not all there
        _fail(sweep_incomplete(status))


def not_a_model_key(line: str) -> str:
    """Hydra's advice for a key the chosen model lacks (``+model.<key>=...``) adds it to a model that cannot take it
    (and fails for the models of a sweep that have it): say what to do instead. A flat MNP key of before the parts
    (``model.memory_size``) is named with today's key (:func:`mnp.runs.migrations.moved_key`)."""
    found = re.match(
        r"Could not override '(model\.[\w.]+)'\. To append to your config use \+[\w.]+=(.*?); (Key .* not in struct)",
        line,
    )
    if not found:
        return line
    key = found.group(1)
    if moved := moved_key(key, found.group(2)):
        return moved
    hint = "; MNP's warm-up follows a shorter trainer.max_epochs by itself" if key == "model.warmup.epochs" else ""
    return (
        f"{key} is not a key of the model ({found.group(3)}; in a sweep, of every model it runs): check its "
        f"spelling (the models' keys: docs/usage.md), and give a key only some models of a sweep have in a "
        f"command of its own for those; +{key} would pass it to a model that does not take it{hint}"
    )


PATH_KEYS = (
    "ckpt_path",
    "dataset.path",
    "data_dir",
    "output_dir",
    "dataset.data_dir",
    "paths.log_dir",
    "paths.data_dir",
    "hydra.run.dir",
    "hydra.sweep.dir",
)


def quote_path_value(arg: str, multirun: bool = False) -> str:
    """``ckpt_path=<dir with '=' or ','>/last.ckpt`` quoted for Hydra's override grammar: run directory
    names carry their overrides (``..._s0_dataset.path=-tmp-a.npz``), which Hydra would otherwise misparse.
    In a ``-m`` sweep, commas between paths holding no ``=`` are Hydra's sweep (``dataset.path=a.npz,b.npz``)."""
    key, sep, value = arg.partition("=")
    if not sep or key.lstrip("+~") not in PATH_KEYS or not value or value[0] in "'\"":
        return arg
    if multirun and "," in value and not any(c in value for c in "=[]{}()' "):
        return arg
    if any(c in value for c in "=,[]{}()' "):
        return f"{key}='{value}'" if "'" not in value else f'{key}="{value}"'
    return arg


def _print_sweep(status: Path) -> None:
    text = sweep_summary(status)
    if text:
        print(text, flush=True)


def run_guarded(fn, cfg):
    """Call ``fn(cfg)``; on a user error print ``error: <message> (traceback in <run dir>/train.log)`` and exit 1.

    With HYDRA_FULL_ERROR=1 the exception propagates with its full traceback. In a multirun,
    Hydra records the failed job and the other jobs go on.
    """
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    from mnp.cli.sweep import in_multirun, run_job

    quiet()  # also in a sweep's worker processes
    if in_multirun():  # failed.json / skipped.json, never SystemExit (it would abort the sweep)
        return run_job(fn, cfg)
    if full_error_requested():
        return fn(cfg)
    try:
        return fn(cfg)
    except (signals.Terminated, SIGTERMException, KeyboardInterrupt) as e:  # the line on stderr, and in train.log
        stop = signals.stopped(e)
        to_log_file(str(stop))
        _fail(str(stop), stop.exit_code)
    except USER_ERRORS as e:  # one line; the traceback (an internal bug raises these types too) goes to train.log
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = traceback_to_log_file(e)
        _fail(msg + (f" (traceback in {where})" if where else ""))
    except Exception as e:  # an unexpected error keeps its traceback on the console, and in train.log too
        traceback_to_log_file(e)
        raise


def _fail(msg: str, status: int = 1) -> None:
    """The CLIs' one way out on an error: ``error: <msg>`` on stderr, exit status 1 (143 after SIGTERM, 130 after
    Ctrl-C)."""
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(status)
