"""One job of a multirun: failures are recorded and isolated, missing data skips the job.

Hydra 1.3's launchers (basic, joblib, submitit) run a job through ``hydra.core.utils.run_job``,
which catches ``Exception`` (not ``SystemExit``), marks the job FAILED and goes on with the other
jobs of the batch; the sweeper re-raises the first failure once the whole batch has run, so the
command exits non-zero. :func:`run_job` keeps to that contract:

* success: returns the metrics (or ``metrics[optimized_metric]`` for the tuning sweeper) and
  removes a ``failed.json`` / ``skipped.json`` left by an earlier attempt;
* a built-in dataset's files are absent: writes ``skipped.json`` with the reason and returns normally,
  so the other jobs run (a file the config names, ``dataset.path``, that is not there is a failure: a typo);
* SIGTERM or Ctrl-C: records the job as interrupted and stops the sweep (:mod:`mnp.runs.signals`);
* any other error: writes ``failed.json`` (type, message, traceback) and re-raises it as a plain
  ``Exception``, so Hydra records the failure and the remaining jobs still run.

Re-running the same sweep (``skip_if_done: true``) skips jobs whose ``metrics.json`` exists and
re-runs the failed and skipped ones. A sweep with a failed or skipped job exits non-zero
(:func:`mnp.cli.cli.main_guarded`); its summary names them.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities.exceptions import SIGTERMException

from datamodules.errors import MissingData
from mnp.cli.console import traceback_to_log_file
from mnp.runs.outputs import write_json
from mnp.runs.signals import Terminated, stop_if_worker, stopped
from mnp.runs.summary import record_job

log = logging.getLogger(__name__)

FAILED, SKIPPED = "failed.json", "skipped.json"


class JobFailed(Exception):
    """A job's error, re-raised as a plain Exception so Hydra isolates it (never SystemExit)."""


def in_multirun() -> bool:
    """True inside a job launched by ``python train.py -m`` (any launcher or sweeper)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def is_missing_data(e: BaseException) -> bool:
    """The data layer found a dataset file absent or could not fetch it (:class:`MissingData`, here or as a cause)."""
    return any(isinstance(x, MissingData) for x in _chain(e))


def job_identity(cfg: DictConfig) -> dict:
    """Model, dataset, seed, experiment and the job's overrides, as far as Hydra knows them."""
    from hydra.core.hydra_config import HydraConfig

    ident = {"experiment": cfg.get("experiment_name"), "seed": cfg.get("seed")}
    if HydraConfig.initialized():
        hc = HydraConfig.get()
        ident.update(
            model=hc.runtime.choices.get("model"),
            dataset=hc.runtime.choices.get("dataset"),
            overrides=list(hc.overrides.task),
            job_num=hc.job.get("num"),
        )
    return ident


def _record(out_dir: Path, name: str, cfg: DictConfig, **fields) -> Path:
    record = {**job_identity(cfg), **fields, "time": dt.datetime.now().isoformat(timespec="seconds")}
    path = out_dir / name
    write_json(path, record)
    return path


def _objective(cfg: DictConfig, results: dict) -> Any:
    key = cfg.get("optimized_metric")
    if not key:
        return results
    if key not in results:
        have = ", ".join(sorted(results)) or "none"
        raise ValueError(f"optimized_metric '{key}' is not in the job's metrics ({have})")
    return float(results[key])


def run_job(fn: Callable[[DictConfig], dict], cfg: DictConfig) -> Any:
    """Run ``fn(cfg)`` as one isolated job of a multirun (see the module docstring)."""
    out_dir = Path(cfg.paths.output_dir)
    metrics = out_dir / "metrics.json"
    done_before = metrics.exists()
    record_job("started", out_dir)  # a job whose worker is killed stays "started": the summary names it
    try:
        value = _objective(cfg, fn(cfg) or {})
    except (Terminated, SIGTERMException, KeyboardInterrupt) as e:  # the sweep stops here; a re-run resumes this job
        stop = stopped(e)
        record_job("interrupted", out_dir, str(stop))
        stop_if_worker()
        raise stop from None
    except Exception as e:  # noqa: BLE001 - every error is recorded, then handed to Hydra
        msg = " ".join(str(e).split()) or type(e).__name__
        if is_missing_data(e) and not OmegaConf.select(cfg, "dataset.path", default=None):
            path = _record(out_dir, SKIPPED, cfg, status="skipped", reason=msg)
            (out_dir / FAILED).unlink(missing_ok=True)
            log.warning("skipped (data not available): %s [%s]", msg, path)
            record_job("skipped", out_dir, msg)
            return math.nan if cfg.get("optimized_metric") else {"skipped": msg}
        path = _record(
            out_dir,
            FAILED,
            cfg,
            status="failed",
            error=type(e).__name__,
            message=msg,
            traceback="".join(traceback.format_exception(e)),
        )
        traceback_to_log_file(e)
        log.error("job failed: %s: %s [%s]", type(e).__name__, msg, path)
        record_job("failed", out_dir, f"{type(e).__name__}: {msg}")
        raise JobFailed(f"{type(e).__name__}: {msg} (recorded in {path})") from e
    for name in (FAILED, SKIPPED):
        (out_dir / name).unlink(missing_ok=True)
    record_job("done before" if done_before else "ok", out_dir)
    return value
