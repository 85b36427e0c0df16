"""Weights & Biases extras for a finished job (``logger=wandb``).

The per-epoch curves (``train/*``, ``val/*``, ``time/epoch_s``) come from Lightning's
``WandbLogger``; the pipeline calls :func:`log_summary` after the test and ``wandb.finish()``
after every job, so a multirun makes one wandb run per job. conf/logger/wandb.yaml sets
group = experiment name, job_type = model and tags model / dataset / seed.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np


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


def log_summary(wandb_logger, results: dict, out_dir: str | Path) -> None:
    """Put the final metrics into ``run.summary`` and experiment/model/dataset/seed into ``run.config``;
    log the reliability diagram and the noise curve.

    Images are logged as ``plots/reliability`` and ``plots/noise`` (wandb.Image) and also saved as
    PNG next to metrics.json. Does nothing on non-zero ranks (empty ``results``).
    """
    if not results:
        return
    import matplotlib.pyplot as plt
    import wandb

    from mnp.core.figures import noise_figure, reliability_figure

    run = wandb_logger.experiment
    run.summary.update(summary_items(results))
    # config keys, so that the UI can group runs by model and dataset (tags cannot be grouped on)
    run.config.update({k: results.get(k) for k in ("experiment", "model", "dataset", "seed")}, allow_val_change=True)
    out_dir = Path(out_dir)
    title = f"{results.get('model')} / {results.get('dataset')} / seed {results.get('seed')}"
    figures = {}
    pred_path = out_dir / "predictions.npz"
    if pred_path.is_file():
        with np.load(pred_path) as z:
            if "test/probs" in z.files:
                figures["reliability"] = reliability_figure(z["test/probs"], z["test/labels"], title)
    noise = noise_figure(results, title)
    if noise is not None:
        figures["noise"] = noise
    images = {}
    for name, fig in figures.items():
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        images[f"plots/{name}"] = wandb.Image(str(path), caption=title)
    if images:
        run.log(images)
