"""A finished run rebuilt from its checkpoint (``load_run``) or its run directory (``load_finished_run``), for
evaluate.py and ``mnp.load``."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
from omegaconf import OmegaConf

from mnp.cli.builders import build_datamodule, eval_protocol
from mnp.cli.errors import UnfinishedRun
from mnp.cli.validate import check_stored
from mnp.model.inference_settings import apply_inference_settings, inference_settings
from mnp.runs.checkpointing import CFG_KEY, load_checkpoint
from mnp.runs.stored_config import checked_run_config, restore_model


def load_run(ckpt_path: str | Path, data_dir: str | None = None, eval_overrides=None, model_overrides=None):
    """Rebuild a finished run from its checkpoint alone: ``(run_cfg, model_name, dataset_name, dm, model, ckpt)``.

    ``data_dir`` points the run's dataset at another data directory; ``eval_overrides`` merge into its
    ``eval`` config; ``model_overrides``, inference-only MNP settings (:mod:`mnp.model.inference_settings`), into
    its model and its ``model`` config. The datamodule is set up and the model carries the checkpoint's weights
    and memory.
    """
    settings = inference_settings(model_overrides)  # refused before anything is loaded
    ckpt_path = Path(ckpt_path)
    ckpt = load_checkpoint(ckpt_path)
    if CFG_KEY not in ckpt:
        raise KeyError(f"{ckpt_path} has no '{CFG_KEY}' entry; it was not written by train.py")
    run_cfg = OmegaConf.create(checked_run_config(ckpt[CFG_KEY], ckpt_path))  # registered classes, plain settings
    if data_dir:
        if "data_dir" in run_cfg.dataset:
            run_cfg.dataset.data_dir = data_dir
        elif "path" in run_cfg.dataset:  # dataset=custom: the same file name, in data_dir
            run_cfg.dataset.path = str(Path(data_dir) / Path(run_cfg.dataset.path).name)
        else:
            raise ValueError(
                f"data_dir={data_dir} does not apply: dataset {run_cfg.dataset.get('name')} reads no data directory"
            )
    if eval_overrides is not None:
        run_cfg.eval = OmegaConf.merge(run_cfg.get("eval") or {}, eval_overrides)
    if settings:
        run_cfg.model = OmegaConf.merge(run_cfg.model, model_overrides)
    check_stored(run_cfg, ckpt_path)
    pl.seed_everything(int(run_cfg.get("seed", 0)), workers=True, verbose=False)
    protocol = eval_protocol(run_cfg)
    dataset_name, dm = build_datamodule(run_cfg, protocol)
    model_name = run_cfg.model.get("name")
    model = restore_model(ckpt, run_cfg.model._target_, ckpt_path)
    if list(model.view_dims) != list(dm.view_dims) or model.num_classes != dm.num_classes:
        raise ValueError(
            f"checkpoint {ckpt_path} was trained on view dims {model.view_dims} and "
            f"{model.num_classes} classes, but the data has {dm.view_dims} and {dm.num_classes}"
        )
    apply_inference_settings(model, settings, getattr(dm, "train_views", None))
    model.configure_evaluation(protocol)
    return run_cfg, model_name, dataset_name, dm, model, ckpt


def load_finished_run(run_dir: str | Path, data_dir: str | None = None, eval_overrides=None):
    """:func:`load_run` of ``run_dir/checkpoints/last.ckpt``, refused when that checkpoint holds an earlier epoch
    than the run's ``trainer.max_epochs`` (checkpointed every n epochs, n not a divisor): its scores would not be
    the run's."""
    path = Path(run_dir) / "checkpoints" / "last.ckpt"
    loaded = load_run(path, data_dir, eval_overrides)
    run_cfg, ckpt = loaded[0], loaded[-1]
    epochs = (run_cfg.get("trainer") or {}).get("max_epochs")
    if epochs is not None and ckpt.get("epoch", epochs - 1) + 1 != epochs:
        raise UnfinishedRun(
            f"{path} holds epoch {ckpt['epoch'] + 1} of the run's {epochs}, so its scores would not be the run's: "
            "train with callbacks.checkpoint.every_n_epochs a divisor of trainer.max_epochs"
        )
    return loaded
