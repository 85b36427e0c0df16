"""Rebuilding a run from the config stored in its checkpoint, without running anything the file names.

A checkpoint is data another person may have written. Its config (``mnp_cfg``) is only trusted to name
one of the project's own registered model and datamodule classes; those are imported by that name, and
built from plain settings (numbers, strings, lists, dicts). Nothing else in the stored config is ever
instantiated (trainer, loggers, callbacks: ``evaluate.py`` builds its own), a Hydra special key
(``_args_``, ``_partial_``, ...) or a nested ``_target_`` is refused, and so is an interpolation
(``${...}``: ``train.py`` stores the resolved config, so a genuine checkpoint holds none). The model is
built from its saved constructor arguments and loaded with ``load_state_dict``, not through Lightning's
``load_from_checkpoint`` (whose hyperparameters may name an ``_instantiator``). A datamodule rebuilt from
a checkpoint never downloads data or builds a feature cache: it reads what is there, so a crafted
``data_dir`` or ``feature_dir`` cannot make the load write files.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

from mnp.runs.checkpointing import CheckpointError, weights_diff
from mnp.runs.migrations import upgrade_hparams

# Every class the project's configs (conf/model*, conf/dataset) instantiate; tests/test_stored_config.py
# checks this list against the _target_ of every config file, so a new model or dataset must be added here.
MODELS = frozenset(
    {
        "mnp.model.MNP",
        "baselines.mlp.MLP",
        "baselines.mcd.MCDropout",
        "baselines.deep_ensemble.DeepEnsemble",
        "baselines.sngp.SNGP",
        "baselines.etp.ETP",
        "baselines.tmc.TMC",
        "baselines.mgp.MGP",
    }
)
DATAMODULES = frozenset(
    {
        "datamodules.features.FeatureDataModule",
        "datamodules.custom.CustomDataModule",
        "datamodules.cifar10c.CIFAR10C",
        "datamodules.digits_c.DigitsC",
        "datamodules.synthetic.TwoMoons",
    }
)
# constructor settings that would write files (a download, a feature cache build), and their read-only values
READ_ONLY = {
    "datamodules.features.FeatureDataModule": {"download": False},
    "datamodules.digits_c.DigitsC": {"build_missing": False},
}
PLAIN = (str, int, float, bool, type(None))


class UnsafeConfig(CheckpointError):
    """A stored config that names code the project does not register, or holds Hydra special keys."""


def init_keys(cls: type, exclude=()) -> list[str]:
    """The keyword arguments ``cls(...)`` accepts, following ``**kwargs`` up the base classes."""
    keys: list[str] = []
    for c in cls.__mro__:
        if "__init__" not in vars(c):
            continue
        params = inspect.signature(c.__init__).parameters.values()
        keys += [
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name != "self"
            and p.name not in keys
            and p.name not in exclude
        ]
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return keys


def _refuse(path: Path, where: str, what: str) -> None:
    raise UnsafeConfig(
        f"checkpoint {path} refused: its stored config {what} at {where}; only checkpoints "
        "written by train.py can be evaluated"
    )


def _check_stored(value: Any, where: str, path: Path, plain: bool = True) -> None:
    """No string anywhere holds an interpolation (``${``); with ``plain``, also only plain containers of plain
    values, string keys and no Hydra special key (a nested ``_target_`` included)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and "${" in key:
                _refuse(path, f"{where}.{key}", "holds an interpolation in a key")
            if plain and not isinstance(key, str):
                _refuse(path, where, f"has a non-string key {key!r}")
            if plain and key.startswith("_") and key.endswith("_"):
                _refuse(path, f"{where}.{key}", "holds a Hydra special key")
            _check_stored(item, f"{where}.{key}", path, plain)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_stored(item, f"{where}[{i}]", path, plain)
    elif plain and not isinstance(value, PLAIN):
        _refuse(path, where, f"holds a {type(value).__name__}")
    elif isinstance(value, str) and "${" in value:
        _refuse(path, where, "holds an interpolation")


def _registered_class(target: Any, registry: frozenset, kind: str, where: str, path: Path) -> type:
    if not isinstance(target, str) or target not in registry:
        _refuse(path, where, f"names {target!r}, which is not one of the project's {kind}")
    module, name = target.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def checked_run_config(stored: Any, path: Path) -> dict:
    """The stored run config, checked: ``model`` and ``dataset`` name registered classes and hold plain
    settings, and no string anywhere is an interpolation. Returns a copy whose dataset is read-only."""
    if not isinstance(stored, dict) or not all(isinstance(stored.get(k), dict) for k in ("model", "dataset")):
        raise CheckpointError(f"checkpoint {path} has no model and dataset config; it was not written by train.py")
    for key, node in stored.items():
        if key in ("model", "dataset"):
            target = node.get("_target_")
            registry, kind = (MODELS, "models") if key == "model" else (DATAMODULES, "datamodules")
            cls = _registered_class(target, registry, kind, f"{key}._target_", path)
            _check_stored({k: v for k, v in node.items() if k != "_target_"}, key, path)
            # the dataset node is the datamodule's arguments (the model is rebuilt from its hyperparameters)
            if key == "dataset" and (unknown := sorted(set(node) - {"_target_", "name"} - set(init_keys(cls)))):
                raise CheckpointError(
                    f"checkpoint {path}: {cls.__name__} takes no argument {unknown[0]!r} (stored at "
                    f"{key}.{unknown[0]}); it was written by another version of the code or not "
                    "by train.py"
                )
        else:  # never instantiated; still no interpolation that resolving the config would evaluate
            _check_stored(node, key, path, plain=False)
    dataset = {**stored["dataset"], **READ_ONLY.get(stored["dataset"]["_target_"], {})}
    return {**stored, "dataset": dataset}


def restore_model(ckpt: dict, target: str, path: Path):
    """The registered model class ``target`` built from the checkpoint's saved constructor arguments
    (plain values only), with its ``on_load_checkpoint`` and weights (strict)."""
    cls = _registered_class(target, MODELS, "models", "model._target_", path)
    hparams = ckpt.get("hyper_parameters")
    if not isinstance(hparams, dict):
        raise CheckpointError(f"checkpoint {path} holds no constructor arguments; it was not written by train.py")
    _check_stored(dict(hparams), "hyper_parameters", path)
    hparams = upgrade_hparams(target, hparams)  # MNP: flat arguments from before its parts
    known = set(init_keys(cls))
    if unknown := sorted(set(hparams) - known):
        raise CheckpointError(
            f"checkpoint {path}: {cls.__name__} takes no argument {unknown[0]!r}; it was written "
            "by another version of the code or not by train.py"
        )
    model = cls(**hparams)
    model.on_load_checkpoint(ckpt)
    if diff := weights_diff(ckpt["state_dict"], model):
        more = f" and {len(diff) - 1} more differences" if len(diff) > 1 else ""
        raise CheckpointError(
            f"checkpoint {path}: its weights do not fit its own hyperparameters ({diff[0]}{more}); "
            "it was written by another version of the code or not by train.py"
        )
    model.load_state_dict(ckpt["state_dict"], strict=True)
    return model
