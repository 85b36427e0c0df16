"""Weights & Biases for train.py (``logger=wandb``) and the report (``mnp.tools.report --wandb-project``).

A run's identity (:func:`run_identity`): name = the run directory's name (``mnp_cub_s2``), group =
``<experiment>/<model>_<dataset>[_<variant>]`` (:mod:`mnp.runs.naming`: its seeds, one cell of the paper's
tables; a custom file's stem as the dataset), tags = model, dataset, experiment (and a custom file's stem);
conf/logger/wandb.yaml sets job_type = train. The resolved run config is logged
whole (nested, shown as dotted keys: ``model.tau``, ``dataset.batch_size``) by :class:`RunLogger`. The
per-epoch curves (``train/*``, ``val/*``, ``time/epoch_s``) come from Lightning; :func:`log_summary` adds
the final metrics, the test-time tables (:mod:`mnp.eval.wandb_tables`) with their charts, and the
reliability and noise images. The pipeline calls ``wandb.finish()`` after every job: one run per job.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import numpy as np
from hydra.utils import get_class
from omegaconf import DictConfig
from pytorch_lightning.loggers import WandbLogger

from mnp.eval.wandb_tables import run_tables
from mnp.runs.naming import data_label, group_name


def mode() -> str:
    """wandb's mode: ``WANDB_MODE`` (online, offline, disabled), else offline (no server needed)."""
    return os.environ.get("WANDB_MODE") or "offline"


class RunLogger(WandbLogger):
    """Lightning's WandbLogger, as train.py uses it.

    - It sets no ``anonymous`` setting (Lightning passes one, which wandb warns about on every run).
    - :meth:`log_hyperparams` logs its first call's params, the resolved run config that the pipeline logs
      before fitting; Lightning's own calls at fit and test repeat the model's hyperparameters (already
      under ``model.*``) as top-level keys and are dropped.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._wandb_init.pop("anonymous", None)
        self._config_logged = False

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        if not self._config_logged:
            self._config_logged = True
            super().log_hyperparams(params, *args, **kwargs)


def run_id(out_dir: str | Path) -> str:
    """The wandb run id of a run directory: the same for every session of the run (a resume continues the wandb
    run that the interrupted session opened, instead of opening a second one), another for another directory."""
    return hashlib.sha1(str(Path(out_dir).resolve()).encode()).hexdigest()[:16]


def run_identity(cfg: DictConfig, node: DictConfig) -> dict:
    """``name``, ``group``, ``tags`` and ``id`` (:func:`run_id`, resumed with ``resume="allow"``) of a wandb logger
    config ``node`` that leaves them null, from the run config (see the module doc); nothing for other loggers."""
    if not issubclass(get_class(node._target_), WandbLogger):
        return {}
    experiment = str(cfg.get("experiment_name", "default"))
    model, dataset = str(cfg.model.get("name")), str(cfg.dataset.get("name"))
    label = data_label(dataset, cfg.dataset)  # a custom file's stem, as the report's cells name it
    identity = {
        "name": Path(cfg.paths.output_dir).name,
        "group": group_name(experiment, model, label, cfg.get("variant")),
        "tags": [model, dataset, experiment] + ([label] if label != dataset else []),
        "id": run_id(cfg.paths.output_dir),
        "resume": "allow",
    }
    return {k: v for k, v in identity.items() if node.get(k) is None}


def summary_items(results: dict) -> dict:
    """The final metrics worth keeping in ``run.summary``: finite numbers and strings."""
    out = {}
    for k, v in results.items():
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[k] = v
        elif isinstance(v, str):
            out[k] = v
    return out


def table_logs(tables: dict, prefix: str = "tables") -> dict:
    """What ``run.log`` takes to log each :class:`~mnp.eval.wandb_tables.Table` as ``<prefix>/<name>`` and
    its charts as ``charts/<name>/<y>`` (``wandb.plot.line`` / ``wandb.plot.bar``)."""
    import wandb

    logged = {}
    for name, t in tables.items():
        table = wandb.Table(columns=t.columns, data=t.rows)
        logged[f"{prefix}/{name}"] = table
        for kind, x, y in t.charts:
            plot = (
                wandb.plot.line(table, x, y, title=f"{name}: {y}")
                if kind == "line"
                else wandb.plot.bar(table, x, y, title=f"{name}: {y}")
            )
            logged[f"charts/{name}/{y}"] = plot
    return logged


def log_summary(wandb_logger, results: dict, out_dir: str | Path, n_bins: int = 15) -> None:
    """Put the final metrics into ``run.summary``; log the tables (noise curve, reliability bins,
    missing-view metrics, OOD AUROC) with their charts, and the reliability diagram and noise curve as
    images ``plots/reliability`` and ``plots/noise`` (also saved as PNG next to metrics.json).

    Does nothing on non-zero ranks (empty ``results``).
    """
    if not results:
        return
    import matplotlib.pyplot as plt
    import wandb

    from mnp.eval.figures import noise_figure, reliability_figure

    run = wandb_logger.experiment
    run.summary.update(summary_items(results))
    out_dir = Path(out_dir)
    title = f"{results.get('model')} / {results.get('dataset')} / seed {results.get('seed')}"
    probs = labels = None
    pred_path = out_dir / "predictions.npz"
    if pred_path.is_file():
        with np.load(pred_path) as z:
            if "test/probs" in z.files:
                probs, labels = z["test/probs"], z["test/labels"]
    figures = {}
    if probs is not None:
        figures["reliability"] = reliability_figure(probs, labels, title, n_bins)
    noise = noise_figure(results, title)
    if noise is not None:
        figures["noise"] = noise
    logged = table_logs(run_tables(results, probs, labels, n_bins))
    for name, fig in figures.items():
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        logged[f"plots/{name}"] = wandb.Image(str(path), caption=title)
    if logged:
        run.log(logged)
