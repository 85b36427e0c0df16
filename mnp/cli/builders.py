"""Building a run from its config: the datamodule, the model, the evaluation protocol, the callbacks and the
loggers, each from its config group (``instantiate`` with one-line errors)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytorch_lightning as pl
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from mnp.cli.errors import USER_ERRORS
from mnp.cli.oom import allocation_failure, record_data
from mnp.cli.validate import resolve_auto
from mnp.cli.wandb_utils import run_identity
from mnp.eval.eval_protocol import EvalProtocol
from mnp.runs.checkpointing import CFG_KEY, PREP_KEY, checkpoint_callbacks
from mnp.runs.csv_history import CsvHistory, keep_csv_history
from mnp.runs.stored_config import init_keys


def build(group: str, node: DictConfig, **kwargs):
    """``instantiate`` whose failures stay one clear line: Hydra wraps a constructor's error (an unknown
    switch value, bad data) in InstantiationException, so the constructor's own error is re-raised, and an
    unknown key (``+model.bogus=1``) is named together with the valid keys."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as e:
        cause = e.__cause__
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(cause))
        if isinstance(cause, TypeError) and unknown:
            valid = init_keys(get_class(node._target_), exclude=kwargs)
            raise ValueError(
                f"{group}: unknown key '{unknown.group(1)}' for {node._target_}; valid keys: {', '.join(valid)}"
            ) from e
        if isinstance(cause, USER_ERRORS) or allocation_failure(cause):
            raise cause.with_traceback(cause.__traceback__) from None
        raise


def _split_name(node: DictConfig) -> tuple[str, DictConfig]:
    node = OmegaConf.to_container(node, resolve=True)
    name = node.pop("name", None)
    return name, OmegaConf.create(node)


def make_datamodule(cfg: DictConfig, protocol: EvalProtocol | None = None) -> tuple[str, pl.LightningDataModule]:
    """The dataset's name and datamodule, not set up yet (nothing read); ``protocol``: the run's, once built."""
    name, node = _split_name(cfg.dataset)
    dm = build("dataset", node)
    record_data(cfg, dm)
    dm.eval_split = (protocol or eval_protocol(cfg)).split  # val: the selection protocol reads no test row
    return name, dm


def build_datamodule(cfg: DictConfig, protocol: EvalProtocol | None = None) -> tuple[str, pl.LightningDataModule]:
    name, dm = make_datamodule(cfg, protocol)
    dm.setup("fit")
    return name, dm


def build_model(cfg: DictConfig, dm, protocol: EvalProtocol | None = None) -> tuple[str, pl.LightningModule]:
    resolve_auto(cfg)
    name, node = _split_name(cfg.model)
    model = build("model", node, num_classes=dm.num_classes, view_dims=dm.view_dims, _convert_="all")
    model.configure_evaluation(protocol or eval_protocol(cfg))
    return name, model


def eval_protocol(cfg: DictConfig) -> EvalProtocol:
    """The run's evaluation protocol: ``cfg.eval``, and the run's seed, which seeds the test predictions' sampling."""
    return EvalProtocol.from_config(cfg.get("eval"), seed=int(cfg.get("seed", 0)))


class StoreConfig(pl.Callback):
    """Put the resolved run config into every checkpoint, so evaluate.py needs nothing else, and the data's
    preprocessing (fitted scalers, label map), so ``mnp.load`` predicts on raw rows without the data file."""

    def __init__(self, cfg: DictConfig):
        self.cfg = OmegaConf.to_container(cfg, resolve=True)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint[CFG_KEY] = self.cfg
        dm = trainer.datamodule
        if hasattr(dm, "preprocessing"):
            checkpoint[PREP_KEY] = dm.preprocessing()


def build_callbacks(cfg: DictConfig, out_dir: Path, has_val: bool) -> list[pl.Callback]:
    cb_cfg = cfg.get("callbacks") or {}
    ckpt_cfg = cb_cfg.get("checkpoint", {})
    monitor = ckpt_cfg.get("monitor", "val/nll") if has_val else None
    every = ckpt_cfg.get("every_n_epochs", 1)
    callbacks = [StoreConfig(cfg), CsvHistory(), *checkpoint_callbacks(out_dir / "checkpoints", monitor, every)]
    for extra in (cb_cfg.get("extra") or {}).values():
        callbacks.append(instantiate(extra))
    return callbacks


def build_loggers(cfg: DictConfig) -> list:
    """The ``logger`` group's loggers; a wandb run's name, group and tags come from the run
    (:func:`mnp.cli.wandb_utils.run_identity`) where its config leaves them null."""
    loggers = []
    for key, node in (cfg.get("logger") or {}).items():
        if node is None:
            continue
        if "wandb" in str(node.get("_target_", "")).lower():  # a broken install: one line now, not in the first log
            try:
                import wandb  # noqa: F401
            except Exception as e:  # noqa: BLE001 - a broken package raises anything on import
                why = f"{type(e).__name__}: {' '.join(str(e).split())[:120]}"
                raise ValueError(
                    f"logger.{key} needs wandb, which cannot be imported ({why}); repair it "
                    "(pip install wandb) or use logger=csv"
                ) from None
        loggers.append(instantiate(node, **run_identity(cfg, node)))
    keep_csv_history(loggers)
    return loggers


DATA_PATH_KEYS = ("data_dir", "path", "feature_dir")


def absolute_data_paths(cfg: DictConfig) -> None:
    """Data locations as absolute paths, so the config stored in checkpoints works from any directory."""
    with open_dict(cfg):
        for node in (cfg.get("paths"), cfg.get("dataset")):
            for key in DATA_PATH_KEYS:
                if node is not None and isinstance(node.get(key), str) and node.get(key):
                    node[key] = os.path.abspath(os.path.expanduser(node[key]))
