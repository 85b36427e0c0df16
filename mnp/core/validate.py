"""One validation pass over a run's whole config, before anything is built or written.

Every failure is a :class:`ConfigError` (a ValueError, so the CLIs print it as one ``error:`` line)
naming the full key, what it must be and what it got. Checked:

* mandatory values left at ``???`` (``dataset=custom`` without ``dataset.path``);
* the type of every ``model.*`` and ``dataset.*`` value against the annotation of the constructor
  argument it feeds (``model.tau=oops``);
* ranges: epochs, seed, batch size, fractions, the evaluation protocol, MNP's warm-up against the
  run length, and the positive sizes of the model.

:func:`resolve_auto` first fills in the values derived from others (MNP's warm-up as a fraction of
the run when the dataset has no config of its own) and records what the config gave for them.
"""
from __future__ import annotations

import inspect
import math
import types
import typing
from collections.abc import Mapping, Sequence

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf, open_dict

from mnp.core.accel import CUDA_GRAPH, PRECISIONS
from mnp.core.protocols import resolve_noise_batch_rows


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key."""


# ---------------------------------------------------------------------------- derived values
def resolve_auto(cfg: DictConfig) -> None:
    """``model.warmup_epochs: null`` means ``round(model.warmup_fraction × trainer.max_epochs)``.

    What the config gave for the keys changed here is kept in ``declared`` (``{dotted key: value}``), so
    a re-run is compared with a run by what the user set, not by derived values (mnp/core/rundir.py).
    """
    model = cfg.get("model") or {}
    if "warmup_fraction" not in model:
        return
    with open_dict(cfg):
        frac = cfg.model.pop("warmup_fraction")
        declared = {"model.warmup_fraction": frac}
        if cfg.model.get("warmup_epochs") is None:
            _check_fraction("model.warmup_fraction", frac, upper_open=True)
            epochs = cfg.trainer.get("max_epochs")
            declared["model.warmup_epochs"] = None
            cfg.model.warmup_epochs = int(round(frac * epochs)) if isinstance(epochs, int) and epochs > 0 else 0
        cfg.declared = declared


# ---------------------------------------------------------------------------- types
def _type_name(hint) -> str:
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a mapping"}
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint) if a is not type(None)) + " (or null)"
    if origin in (list, tuple, Sequence) or hint in (list, tuple, Sequence):
        return "a list"
    return names.get(origin or hint, getattr(hint, "__name__", str(hint)))


def conforms(value, hint) -> bool:
    """Does a config value fit a constructor annotation? Unknown annotations accept anything."""
    if hint is typing.Any or hint is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, a) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple, Sequence) or hint in (list, tuple, Sequence):
        if not isinstance(value, (list, tuple)):
            return False
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return not args or all(conforms(v, args[0]) for v in value)
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return isinstance(value, Mapping)
    return True


def _hints(cls: type) -> dict:
    """Constructor annotations of ``cls`` and of the bases its ``**kwargs`` reach."""
    hints: dict = {}
    for c in cls.__mro__:
        if "__init__" not in vars(c):
            continue
        try:
            found = typing.get_type_hints(c.__init__)
        except Exception:  # noqa: BLE001 - an annotation we cannot evaluate checks nothing
            found = {}
        params = inspect.signature(c.__init__).parameters.values()
        for p in params:
            hints.setdefault(p.name, found.get(p.name, inspect.Parameter.empty))
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return hints


def check_types(group: str, node: Mapping) -> None:
    target = node.get("_target_")
    if not target:
        return
    try:
        hints = _hints(get_class(target))
    except Exception:  # noqa: BLE001 - an unknown target is reported when it is instantiated
        return
    for key, value in node.items():
        if key.startswith("_") or key not in hints:
            continue
        if not conforms(value, hints[key]):
            raise ConfigError(f"{group}.{key} must be {_type_name(hints[key])}, got {value!r}")


# ---------------------------------------------------------------------------- ranges
def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_int(key: str, v, low: int) -> None:
    if not _is_int(v) or v < low:
        raise ConfigError(f"{key} must be an integer >= {low}, got {v!r}")


def _check_fraction(key: str, v, upper_open: bool = True, lower_open: bool = False) -> None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ok = ok and (v > 0 if lower_open else v >= 0) and (v < 1 if upper_open else v <= 1)
    if not ok:
        lo, hi = "(0" if lower_open else "[0", "1)" if upper_open else "1]"
        raise ConfigError(f"{key} must be a fraction in {lo}, {hi}, got {v!r}")


def _check_positive(key: str, v) -> None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
        raise ConfigError(f"{key} must be a positive number, got {v!r}")


def check_ranges(c: dict) -> None:
    trainer, model, data, ev = c.get("trainer") or {}, c.get("model") or {}, c.get("dataset") or {}, c.get("eval") or {}
    epochs = trainer.get("max_epochs")
    _check_int("trainer.max_epochs", epochs, 1)
    for key in ("batch_size", "eval_batch_size"):
        if key in data:
            _check_int(f"dataset.{key}", data[key], 1)
    if "val_fraction" in data:
        _check_fraction("dataset.val_fraction", data["val_fraction"])
    if "test_fraction" in data:
        _check_fraction("dataset.test_fraction", data["test_fraction"], lower_open=True)
    for key in ("num_samples", "memory_size", "d_e"):
        if key in model:
            _check_int(f"model.{key}", model[key], 1)
    for key in ("tau", "lengthscale_init", "lengthscale_lr_scale"):  # numbers here (mgp's lengthscale_init: "data")
        if isinstance(model.get(key), (int, float)):
            _check_positive(f"model.{key}", model[key])
    if "lr" in (model.get("optim") or {}):
        _check_positive("model.optim.lr", model["optim"]["lr"])
    if "warmup_epochs" in model:
        w = model["warmup_epochs"]
        _check_int("model.warmup_epochs", w, 0)
        if w >= epochs:
            raise ConfigError(f"model.warmup_epochs={w} >= trainer.max_epochs={epochs}: every epoch would be warm-up "
                              f"and the classifier never trains; set trainer.max_epochs > {w} "
                              f"(e.g. trainer.max_epochs={w + max(epochs, 20)}) or model.warmup_epochs < {epochs}")
    levels = ev.get("noise_levels")
    if levels is not None:
        if not isinstance(levels, (list, tuple)) or not levels or not all(
                isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s >= 0 for s in levels):
            raise ConfigError(f"eval.noise_levels must be null or a non-empty list of finite numbers >= 0, got {levels!r}")
    if "n_bins" in ev:
        _check_int("eval.n_bins", ev["n_bins"], 1)
    if ev.get("noise_subset_size") is not None:
        _check_int("eval.noise_subset_size", ev["noise_subset_size"], 1)
    try:
        resolve_noise_batch_rows(ev.get("noise_batch_rows", "auto"), "cpu")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    check_accel(c.get("accel") or {})
    ckpt = (c.get("callbacks") or {}).get("checkpoint") or {}
    if "every_n_epochs" in ckpt:
        _check_int("callbacks.checkpoint.every_n_epochs", ckpt["every_n_epochs"], 0)


def check_accel(accel: Mapping) -> None:
    """``accel``: the values mnp.core.accel accepts (whether they apply to the model and device is checked there)."""
    if accel.get("cuda_graph", False) not in CUDA_GRAPH:
        raise ConfigError(f"accel.cuda_graph must be true, false or emulate, got {accel['cuda_graph']!r}")
    if accel.get("matmul_precision", "highest") not in PRECISIONS:
        raise ConfigError(f"accel.matmul_precision must be highest, high or medium, got {accel['matmul_precision']!r}")
    every = accel.get("check_finite_every", "auto")
    if every != "auto":
        _check_int("accel.check_finite_every (or auto)", every, 0)


# ---------------------------------------------------------------------------- entry point
def validate(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` on the first value of ``cfg`` that cannot work (see the module docstring)."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        key = missing[0]
        raise ConfigError(f"{key} is required: add {key}=<value> to the command"
                          + (" (the data file, e.g. dataset.path=my_data.npz)" if key == "dataset.path" else ""))
    c = OmegaConf.to_container(cfg, resolve=True)
    _check_int("seed", c.get("seed", 0), 0)  # first: dataset.seed interpolates it
    for group in ("model", "dataset"):
        if isinstance(c.get(group), Mapping):
            check_types(group, c[group])
    check_ranges(c)
