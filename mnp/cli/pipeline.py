"""``train(cfg)`` and ``evaluate(cfg)``: instantiate, fit, test and write the run's outputs.

Outputs of a run directory: ``metrics.json`` and ``predictions.npz`` (both written atomically),
``config.yaml`` (the resolved config), ``checkpoints/last.ckpt`` (+ the best one with a
validation split) and logger files.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf, open_dict
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import WandbLogger

from mnp.cli.accel import configure as configure_accel
from mnp.cli.accel import matmul_precision
from mnp.cli.builders import (
    absolute_data_paths,
    build,
    build_callbacks,
    build_datamodule,
    build_loggers,
    build_model,
    eval_protocol,
    make_datamodule,
)
from mnp.cli.errors import StoppedEarly
from mnp.cli.oom import explains_memory
from mnp.cli.progress import progress_callbacks
from mnp.cli.resources import set_threads
from mnp.cli.run_loading import load_run
from mnp.cli.startup import FirstStep, run_start
from mnp.cli.validate import (
    check_eval,
    check_manual_optimization,
    check_train_batches,
    resolve_auto,
    resolve_epochs,
    validate,
)
from mnp.cli.wandb_utils import log_summary
from mnp.eval.calibration import check_fit_rows
from mnp.runs import signals
from mnp.runs.checkpointing import (
    CFG_KEY,
    AtomicCheckpointIO,
    RunTime,
    atomic_write,
    check_epochs,
    check_fits,
    check_writable,
    holds_run_dir,
    load_checkpoint,
    resume_checkpoint,
)
from mnp.runs.codeversion import code_version
from mnp.runs.csv_history import CsvHistory
from mnp.runs.datahash import data_hashes, warn_if_data_changed
from mnp.runs.dirname import eval_dir, hydra_variant
from mnp.runs.outputs import split_record, write_json, write_npz
from mnp.runs.places import check_output_dir
from mnp.runs.rundir import check_checkpoint_config, check_eval_output, check_reuse, keep_derived, stored_config
from mnp.runs.runrecord import accept, finished_record, staged
from mnp.runs.summary import log_run_summary

log = logging.getLogger(__name__)


def spawned(trainer) -> bool:
    """True in the main process of a ddp_spawn (or ddp_fork) run: fit ran in child processes, and only the
    weights came back, none of the module's other state (test results, epoch times, the epoch count)."""
    from pytorch_lightning.strategies.launchers.multiprocessing import _MultiProcessingLauncher

    return isinstance(getattr(trainer.strategy, "launcher", None), _MultiProcessingLauncher)


def finish_wandb() -> None:
    """End the job's wandb run, if a logger started one (a run without wandb never imports it: about 1 s)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


def write_outputs(out_dir: Path, model, identity: dict, extra: dict, tested: float | None = None) -> dict:
    """predictions.npz, then metrics.json; ``tested`` (the test's end, ``time.time()``) adds ``time/teardown_s``,
    the end of the test to the outputs written (metrics.json's own write of about a millisecond aside)."""
    results = dict(identity)
    results.update(model.test_results)
    results.update(extra)
    write_npz(out_dir / "predictions.npz", model.test_arrays)
    if tested is not None:
        results["time/teardown_s"] = time.time() - tested
    write_json(out_dir / "metrics.json", results)
    return results


def check_trained(trainer, out_dir: Path) -> None:
    """A fit that ended before ``trainer.max_epochs`` without reaching ``trainer.max_steps`` (``trainer.max_time``, a
    callback that stops training) is no finished run: :class:`StoppedEarly`, nothing tested or recorded, and its
    ``last.ckpt`` resumes it."""
    steps = trainer.max_steps
    if trainer.current_epoch >= trainer.max_epochs or (steps not in (None, -1) and trainer.global_step >= steps):
        return
    raise StoppedEarly(
        f"training stopped after {trainer.current_epoch} of {trainer.max_epochs} epochs (trainer.max_time, "
        "or a callback that stops training), so the run is not recorded as finished; "
        f"{out_dir / 'checkpoints'} keeps its last checkpoint: raise or remove trainer.max_time and "
        "re-run the same command to resume"
    )


def _identity(cfg: DictConfig, model_name: str | None, dataset_name: str | None, trainer, dm) -> dict:
    return {
        "model": model_name,
        "dataset": dataset_name,
        "seed": int(cfg.get("seed", 0)),
        "epochs": int(trainer.current_epoch) if trainer is not None else None,
        "experiment": cfg.get("experiment_name", "default"),
        **split_record(dm),
        **code_version(),
    }


def check_run_dir(cfg: DictConfig, out_dir: Path, resumed: dict | None, finished: bool, data_files) -> None:
    """The run in ``out_dir`` is reused (skipped as finished, or resumed from the checkpoint ``resumed``) only by
    a job of its config and data (else :class:`RunDirConflict`); a resume keeps the values derived for the run."""
    inside = None  # no config.yaml beside the checkpoint: compare with the config stored inside it
    if resumed and cfg.get("ckpt_path") == "last" and not (out_dir / "config.yaml").is_file():
        inside = resumed.get(CFG_KEY)
    stored = stored_config(out_dir, inside)
    if stored is None:
        return
    check_reuse(out_dir, OmegaConf.to_container(cfg, resolve=True), stored, not finished, data_files)
    if not finished:
        keep_derived(cfg, stored)
        validate(cfg)


# ---------------------------------------------------------------------------- train's steps
@dataclass
class Job:
    """What :func:`train`'s steps hand on: the run's config and data, then its model and trainer."""

    cfg: DictConfig
    t0: float  # perf_counter at entry: time/total_s
    started: float  # the process's start: time/startup_s
    out_dir: Path
    protocol: Any
    loaded: tuple | None  # dataset=custom with epochs sized by steps: (name, datamodule) already read
    dataset_name: str | None
    dm: Any
    resume_from: str | None
    resumed: dict | None  # the checkpoint to resume, read once for the checks
    model_name: str | None = None
    model: Any = None
    loggers: list = field(default_factory=list)
    trainer: Any = None
    clock: RunTime | None = None
    first_step: FirstStep | None = None
    step: dict = field(default_factory=dict)  # which training step runs, for metrics.json


def prepare(cfg: DictConfig) -> Job:
    """Resolve and check the whole config before anything is built or written; open the datamodule and find the
    checkpoint to resume."""
    t0, started = time.perf_counter(), run_start(time.time())
    loaded = resolve_epochs(cfg, lambda: build_datamodule(cfg))  # dataset=custom: epochs sized by steps on the data
    resolve_auto(cfg)
    validate(cfg)
    absolute_data_paths(cfg)
    out_dir = Path(cfg.paths.output_dir)
    resume_from, resumed = resume_checkpoint(cfg.get("ckpt_path"), out_dir)
    protocol = eval_protocol(cfg)  # built once, read by the datamodule (its split) and the model
    dataset_name, dm = loaded or make_datamodule(cfg, protocol)
    return Job(cfg, t0, started, out_dir, protocol, loaded, dataset_name, dm, resume_from, resumed)


def reuse(job: Job) -> dict | None:
    """The finished run's record when the job is skipped (``skip_if_done``); a finished or resumable run of another
    config is never reused."""
    metrics_path = job.out_dir / "metrics.json"
    record = finished_record(metrics_path)
    if metrics_path.exists() or job.resume_from:
        check_run_dir(job.cfg, job.out_dir, job.resumed, record is not None, job.dm.data_files())
    if job.cfg.get("skip_if_done", False) and record is not None:
        log.info("skipping: %s already exists", metrics_path)
        return record
    if job.resume_from:
        check_epochs(job.resume_from, job.cfg.trainer.max_epochs, job.resumed)
        log.info("resuming from %s", job.resume_from)
    return None


def claim(job: Job) -> None:
    """The run directory becomes the job's (Hydra's record and train.log are written from here on); threads, seed."""
    cfg = job.cfg
    check_writable(job.out_dir)  # a read-only run dir: one line, and Hydra's record and train.log are not written
    accept()
    variant = hydra_variant()
    if cfg.get("variant") is None and variant:  # report rows tell ad-hoc override runs apart
        with open_dict(cfg):
            cfg.variant = variant
    set_threads(cfg.get("torch_threads"))
    pl.seed_everything(int(cfg.seed), workers=True, verbose=False)


def setup_data(job: Job) -> None:
    """Read the data, record every file's sha256 in the config, and refuse a split too small to train or calibrate."""
    dm = job.dm
    if job.loaded is None:  # dataset=custom with epochs sized by steps has read its data already
        dm.setup("fit")
    with open_dict(job.cfg):  # config.yaml and the checkpoints record it
        job.cfg.data_hash = data_hashes(dm.data_files(), dm.read_sha256)
    check_train_batches(job.cfg.trainer, len(dm.train_dataloader()))  # a fraction of them that rounds to none
    if job.protocol.calibration == "temperature":  # too few validation rows to fit T: refused before training
        check_fit_rows(dm.val_y)


def build_checked_model(job: Job) -> None:
    """The model, its optimisers tried once, and a resumed checkpoint checked against it."""
    cfg = job.cfg
    job.model_name, job.model = build_model(cfg, job.dm, job.protocol)
    try:  # a dry run: Lightning calls it in fit, after config.yaml is written
        job.model.configure_optimizers()
    except ValueError as e:
        raise ValueError(f"model.optim: {e}") from None
    check_manual_optimization(cfg.trainer, job.model_name, job.model.automatic_optimization)
    if job.resume_from:
        check_fits(job.resume_from, job.model, job.resumed)
        if cfg.get("ckpt_path") != "last":  # a run's own last.ckpt: compared in check_run_dir
            config = OmegaConf.to_container(cfg, resolve=True)
            check_checkpoint_config(job.resume_from, config, job.resumed.get(CFG_KEY))


def build_trainer(job: Job) -> None:
    """Loggers, callbacks and the trainer; then config.yaml, written once everything is built, so a bad config or
    bad data leaves no output behind."""
    cfg, out_dir = job.cfg, job.out_dir
    has_val = len(getattr(job.dm, "val_y", [])) > 0
    job.loggers = build_loggers(cfg)
    for lg in job.loggers:  # the whole resolved run config, not just the model's hyperparameters
        lg.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    progress, bar = progress_callbacks(bool(cfg.trainer.get("enable_progress_bar", True)))
    callbacks, job.first_step = build_callbacks(cfg, out_dir, has_val), FirstStep()
    job.clock, job.resumed = RunTime(job.t0, job.resumed), None  # Lightning reads the checkpoint itself
    job.trainer = build(
        "trainer",
        cfg.trainer,
        logger=job.loggers or False,
        callbacks=[*callbacks, job.clock, *progress, job.first_step],
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        enable_progress_bar=bar,
        default_root_dir=str(out_dir),
        plugins=[AtomicCheckpointIO(job.resume_from, out_dir / "checkpoints")],
        limit_val_batches=None if has_val else 0,
    )
    job.step = configure_accel(job.model, cfg.get("accel") or {}, job.trainer)
    atomic_write(out_dir / "config.yaml", lambda tmp: OmegaConf.save(cfg, tmp, resolve=True))


def fit(job: Job) -> None:
    """Train; an interrupted or early-stopped fit is no finished run."""
    job.trainer.fit(job.model, datamodule=job.dm, ckpt_path=job.resume_from)
    if job.trainer.interrupted:
        raise KeyboardInterrupt("training was interrupted")
    if not spawned(job.trainer):
        check_trained(job.trainer, job.out_dir)


def record_test(job: Job) -> dict[str, Any]:
    """Test the trained model; write metrics.json and predictions.npz, wandb's summary and the run's summary."""
    cfg, out_dir, trainer, model = job.cfg, job.out_dir, job.trainer, job.model
    identity = _identity(cfg, job.model_name, job.dataset_name, trainer, job.dm)
    if spawned(trainer):  # the fit ran in child processes: test its end state (last.ckpt) here, on one device
        last = out_dir / "checkpoints" / "last.ckpt"
        identity["epochs"] = int(load_checkpoint(last)["epoch"]) + 1
        trainer = build(
            "trainer",
            cfg.trainer,
            strategy="auto",
            devices=1,
            num_nodes=1,
            logger=job.loggers or False,
            callbacks=[CsvHistory()],
            enable_checkpointing=False,
            default_root_dir=str(out_dir),
            plugins=[AtomicCheckpointIO()],
        )
        trainer.test(model, datamodule=job.dm, ckpt_path=str(last), verbose=False)
    else:
        trainer.test(model, datamodule=job.dm, verbose=False)
    times = {"time/total_s": job.clock.elapsed()}  # every session of a resumed run
    if job.first_step.at is not None:
        times["time/startup_s"] = job.first_step.at - job.started
    results = (
        {}
        if not trainer.is_global_zero
        else write_outputs(out_dir, model, identity, {**times, **job.step}, tested=time.time())
    )
    for lg in job.loggers:
        if isinstance(lg, WandbLogger):
            log_summary(lg, results, out_dir, model.protocol.n_bins)
    if results:  # last: it lists the run's files, the figures log_summary saves included
        log_run_summary(results, out_dir)
    return results


# ---------------------------------------------------------------------------- entry points
@staged
@explains_memory
@holds_run_dir
def train(cfg: DictConfig) -> dict[str, Any]:
    """Train, then test; write metrics.json, predictions.npz, config.yaml and checkpoints.

    Returns the metrics dict (also when the job is skipped because it already finished).
    """
    job = prepare(cfg)
    if (record := reuse(job)) is not None:
        return record
    claim(job)
    setup_data(job)
    build_checked_model(job)
    build_trainer(job)
    precision = (cfg.get("accel") or {}).get("matmul_precision")
    try:
        with matmul_precision(precision), signals.resumable(job.trainer, job.out_dir / "checkpoints"):
            fit(job)
            return record_test(job) if cfg.get("test", True) else {}
    finally:
        finish_wandb()


@staged
@explains_memory
def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Rebuild model and datamodule from a checkpoint alone, re-run the full evaluation (SIGTERM and Ctrl-C end it
    in one line, :func:`mnp.runs.signals.evaluating`)."""
    with signals.evaluating():
        return _evaluate(cfg)


def _evaluate(cfg: DictConfig) -> dict[str, Any]:
    t0 = time.perf_counter()
    ev = cfg.get("eval")  # the +eval.* overrides, checked before anything is loaded (+model.*: by load_run, first)
    check_eval(OmegaConf.to_container(ev, resolve=True) if OmegaConf.is_config(ev) else ev or {})
    ckpt_path = Path(cfg.ckpt_path)
    if cfg.output_dir:
        check_output_dir(cfg.output_dir)
    out_dir = Path(cfg.output_dir or eval_dir(str(ckpt_path), cfg.get("eval"), cfg.get("data_dir"), cfg.get("model")))
    data_dir = os.path.abspath(os.path.expanduser(cfg.data_dir)) if cfg.get("data_dir") else None
    run_cfg, model_name, dataset_name, dm, model, ckpt = load_run(
        ckpt_path, data_dir, cfg.get("eval"), cfg.get("model")
    )
    warn_if_data_changed(run_cfg, dm.data_files(), ckpt_path, dm.read_sha256)
    check_eval_output(out_dir, ckpt_path, OmegaConf.to_container(run_cfg, resolve=True))
    check_writable(out_dir, "output_dir")
    if model.protocol.calibration == "temperature":
        check_fit_rows(getattr(dm, "val_y", []), str(ckpt_path))
    accept()  # Hydra's record (.hydra/) and evaluate.log reach the output folder
    trainer = pl.Trainer(
        accelerator=cfg.trainer.accelerator,
        devices=cfg.trainer.devices,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    with matmul_precision((run_cfg.get("accel") or {}).get("matmul_precision")):
        trainer.test(model, datamodule=dm, verbose=False)
    identity = _identity(run_cfg, model_name, dataset_name, None, dm)
    identity["epochs"] = int(ckpt.get("epoch", -1)) + 1
    identity["checkpoint"] = str(ckpt_path)
    planned = (run_cfg.get("trainer") or {}).get("max_epochs")
    if isinstance(planned, int) and identity["epochs"] < planned:
        log.warning(
            "%s holds %d of its run's %d epochs: this evaluates an unfinished run",
            ckpt_path,
            identity["epochs"],
            planned,
        )
    atomic_write(out_dir / "config.yaml", lambda tmp: OmegaConf.save(run_cfg, tmp, resolve=True))
    results = write_outputs(out_dir, model, identity, {"time/total_s": time.perf_counter() - t0})
    log_run_summary(results, out_dir)
    return results
