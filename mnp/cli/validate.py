"""One validation pass over a run's whole config, before anything is built or written.

Every failure is a :class:`ConfigError` (a ValueError, so the CLIs print it as one ``error:`` line)
naming the full key, what it must be and what it got. Checked:

* mandatory values left at ``???`` (``dataset=custom`` without ``dataset.path``);
* the type of every ``model.*`` and ``dataset.*`` value against the annotation of the constructor argument it
  feeds (``model.loss.tau=oops``, ``model.warmup=1``), and MNP's flat keys of before its parts (``+model.d_e=8``);
* the model's numeric values against the domains its class declares (:mod:`mnp.framework.domains`, the same
  check its constructor makes);
* ranges: epochs, seed, batch size, fractions, the evaluation protocol (:func:`check_eval`, which
  evaluate.py calls on its ``+eval.*`` overrides), MNP's warm-up against the run length, and at least one
  training batch (:func:`check_train_batches`).

:func:`resolve_auto` first fills in the values derived from others (MNP's warm-up as a fraction of the run when
the dataset has no config of its own, or scaled to a run shortened below it), after :func:`resolve_epochs` sized the
run by optimiser steps on the data (dataset=custom), and records what the config gave for them. Once the model is built,
:func:`check_manual_optimization` refuses the Trainer keys a model's own optimisation step cannot honour.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf, open_dict

from mnp.checks import check_fraction, check_int, is_int, is_real
from mnp.cli.accel import CUDA_GRAPH, PRECISIONS
from mnp.cli.errors import ConfigError
from mnp.cli.resolvers import WARMUP_RESOLVER, register_resolver
from mnp.cli.tuned import check_tuned
from mnp.eval.eval_protocol import SEED_MAX, EvalProtocol
from mnp.eval.posthoc import validation_need
from mnp.framework.domains import check_domains
from mnp.runs.migrations import MNP_TARGET, moved_key

log = logging.getLogger(__name__)
SCALED = re.compile(r"\$\{" + WARMUP_RESOLVER + r":\s*(\d+)\s*,\s*(\d+)\s*\}")


# ---------------------------------------------------------------------------- derived values
def resolve_auto(cfg: DictConfig) -> None:
    """``model.warmup.epochs: null`` means ``round(model.warmup.fraction × trainer.max_epochs)``; a dataset's
    ``${mnp_warmup:W,E}`` is W, or its share of a ``trainer.max_epochs`` that leaves no epoch after it
    (:func:`mnp.cli.resolvers.scaled_warmup`), said in one line. Both become plain numbers here.

    What the config gave for the keys changed here is kept in ``declared`` (``{dotted key: value}``), so
    a re-run is compared with a run by what the user set, not by derived values (mnp/runs/rundir.py).
    """
    register_resolver()
    model = cfg.get("model") or {}
    warmup = model.get("warmup") if isinstance(model, DictConfig) else None
    if not isinstance(warmup, DictConfig):  # a model without a warm-up part (the baselines)
        return
    raw = OmegaConf.to_container(warmup, resolve=False).get("epochs")
    scaled = SCALED.fullmatch(raw.strip()) if isinstance(raw, str) else None
    if scaled:
        with open_dict(cfg):
            warmup.epochs = value = int(warmup.epochs)
        first, of = (int(g) for g in scaled.groups())
        if value != first:  # scaled to a shortened run: a resume with more epochs compares what the config gave
            with open_dict(cfg):
                cfg.declared = {"model.warmup.epochs": raw.strip()}
            log.info(
                "trainer.max_epochs=%d leaves no epoch after the dataset's %d warm-up epochs: the warm-up keeps "
                "its share of the run, model.warmup.epochs=%d (%d of %d by default; set model.warmup.epochs to "
                "choose)",
                cfg.trainer.max_epochs,
                first,
                value,
                first,
                of,
            )
    if "fraction" not in warmup:
        return
    with open_dict(cfg):
        frac = warmup.pop("fraction")
        declared = {"model.warmup.fraction": frac}
        if warmup.get("epochs") is None:
            _check_fraction("model.warmup.fraction", frac, upper_open=True)
            epochs = cfg.trainer.get("max_epochs")
            declared["model.warmup.epochs"] = None
            warmup.epochs = int(round(frac * epochs)) if isinstance(epochs, int) and epochs > 0 else 0
        cfg.declared = declared


def resolve_epochs(cfg: DictConfig, load: Callable[[], tuple]) -> tuple | None:
    """``trainer.max_epochs: null`` with ``train_steps: S`` (dataset=custom's configs): the epochs that give about
    S optimiser steps on this data, ceil(S / training batches per epoch), at least ``min_epochs``; said in one
    line. ``load()`` builds and sets up the datamodule, ``(name, datamodule)``, which is returned for reuse;
    None (nothing loaded) when the epochs are given or the data is not named yet (``dataset.path`` missing)."""
    steps, epochs = cfg.get("train_steps"), cfg.trainer.get("max_epochs")
    if epochs is not None or steps is None or OmegaConf.missing_keys(cfg.get("dataset") or {}):
        return None
    _check_int("train_steps", steps, 1)
    least = cfg.get("min_epochs", 1)
    _check_int("min_epochs", least, 1)
    loaded = load()
    batches = len(loaded[1].train_dataloader())
    with open_dict(cfg):
        cfg.trainer.max_epochs = max(math.ceil(steps / batches), least)
    log.info(
        "%d training batches per epoch: trainer.max_epochs=%d for about train_steps=%d optimiser steps (at least "
        "min_epochs=%d; set trainer.max_epochs to choose)",
        batches,
        cfg.trainer.max_epochs,
        steps,
        least,
    )
    return loaded


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
        return is_int(value)
    if hint is float:
        return is_real(value)
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


def _part_class(hint) -> type | None:
    """The dataclass among ``hint``'s types (a model part, mnp.model.parts), if any."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return next((h for h in options if dataclasses.is_dataclass(h)), None)


def _check_part(where: str, hint, value) -> None:
    """A part's config node (``model.memory``): only its own settings, each of its declared type."""
    cls = _part_class(hint)
    if cls is None or value is None:
        return
    if not isinstance(value, Mapping):  # conforms() takes anything for a part class: its settings could not be read
        raise ConfigError(f"{where} must be a mapping of its settings, got {value!r}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    for key, item in value.items():
        if key in getattr(cls, "config_only", ()):  # resolved into other settings before the model is built
            continue
        if key not in known:
            raise ConfigError(f"{where} has no setting {key!r}; it takes {', '.join(known)}")
        if not conforms(item, hints[key]):
            raise ConfigError(f"{where}.{key} must be {_type_name(hints[key])}, got {item!r}")
        _check_part(f"{where}.{key}", hints[key], item)


def check_types(group: str, node: Mapping) -> None:
    """Each value against its constructor argument's annotation, then against the class's declared domains."""
    target = node.get("_target_")
    if not target:
        return
    try:
        cls = get_class(target)
        hints = _hints(cls)
    except Exception:  # noqa: BLE001 - an unknown target is reported when it is instantiated
        return
    for key, value in node.items():
        if key not in hints and target == MNP_TARGET and (moved := moved_key(f"{group}.{key}", value)):
            raise ConfigError(moved)  # +model.memory_size=30: named here, before the data is read
        if key.startswith("_") or key not in hints:
            continue
        if not conforms(value, hints[key]):
            raise ConfigError(f"{group}.{key} must be {_type_name(hints[key])}, got {value!r}")
        _check_part(f"{group}.{key}", hints[key], value)
    try:
        check_domains(getattr(cls, "domains", {}), node, f"{group}.")
    except ValueError as e:
        raise ConfigError(str(e)) from None


# ---------------------------------------------------------------------------- ranges
_check_int = functools.partial(check_int, error=ConfigError)
_check_fraction = functools.partial(check_fraction, error=ConfigError)


def check_ranges(c: dict) -> None:
    trainer, model, data, ev = c.get("trainer") or {}, c.get("model") or {}, c.get("dataset") or {}, c.get("eval") or {}
    epochs = trainer.get("max_epochs")
    _check_int("trainer.max_epochs", epochs, 1)
    for key in ("batch_size", "eval_batch_size"):
        if key in data:
            _check_int(f"dataset.{key}", data[key], 1)
    if "seed" in data:
        _check_int("dataset.seed", data["seed"], 0, SEED_MAX)
    if "val_fraction" in data:
        _check_fraction("dataset.val_fraction", data["val_fraction"])
    if "test_fraction" in data:
        _check_fraction("dataset.test_fraction", data["test_fraction"], lower_open=True)
    w = (model.get("warmup") or {}).get("epochs")  # its domain (an integer >= 0) is checked with the model's types
    if is_int(w) and w >= epochs:
        raise ConfigError(
            f"model.warmup.epochs={w} >= trainer.max_epochs={epochs}: every epoch would be warm-up "
            f"and the classifier never trains; set trainer.max_epochs > {w} "
            f"(e.g. trainer.max_epochs={w + max(epochs, 20)}) or model.warmup.epochs < {epochs}"
        )
    check_eval(ev)
    if data.get("cv_folds") and ev.get("split") != "val":  # cross-validation on the training rows
        raise ConfigError("dataset.cv_folds > 0 drops the test rows: set eval.split=val, as experiment=tune does")
    if ev.get("split") == "val" and not data.get("val_fraction") and not data.get("cv_folds"):
        raise ConfigError(
            "eval.split=val evaluates on the validation rows: set dataset.val_fraction > 0 "
            "(the selection protocol uses 0.2, docs/method.md §5.4)"
        )
    if (need := validation_need(ev)) and not data.get("val_fraction"):
        raise ConfigError(f"{need}: set dataset.val_fraction > 0 (e.g. 0.2; docs/method.md §5.6, §5.7)")
    check_train_batches(trainer)
    check_device(trainer)
    check_accel(c.get("accel") or {})
    ckpt = (c.get("callbacks") or {}).get("checkpoint") or {}
    if "every_n_epochs" in ckpt:
        _check_int("callbacks.checkpoint.every_n_epochs", ckpt["every_n_epochs"], 0)


def check_seed(seed) -> None:
    _check_int("seed", seed, 0, SEED_MAX)


def check_eval(ev) -> None:
    """``eval.*``, for train.py and for evaluate.py (whose ``+eval.*`` overrides merge into the checkpoint's
    config; checked before anything is loaded): known keys, and values the evaluation protocol can use (the
    checks of :class:`~mnp.eval.eval_protocol.EvalProtocol`, which the run builds from the same node)."""
    try:
        EvalProtocol.from_config(ev)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def check_train_batches(trainer: Mapping, n_batches: int | None = None) -> None:
    """The run trains on at least one batch, else its metrics would be an untrained model's:
    ``trainer.limit_train_batches`` is an integer >= 1 or a fraction in (0, 1] that keeps at least one of the
    ``n_batches`` training batches per epoch (checked again once the data is loaded), ``trainer.max_steps``
    is -1 (no limit) or >= 1, and ``trainer.limit_test_batches`` leaves a batch to test."""
    untrained = "the run would train on no batch and report an untrained model"
    limit = trainer.get("limit_train_batches")
    if limit is not None:
        fraction = isinstance(limit, float) and math.isfinite(limit) and 0 < limit <= 1
        if not fraction and not (is_int(limit) and limit >= 1):
            raise ConfigError(
                "trainer.limit_train_batches must be an integer >= 1 (batches) or a fraction in "
                f"(0, 1], got {limit!r}" + (f": {untrained}" if limit == 0 else "")
            )
        if fraction and n_batches is not None and int(n_batches * limit) < 1:
            least = math.ceil(1000 / n_batches) / 1000
            raise ConfigError(
                f"trainer.limit_train_batches={limit} keeps 0 of the {n_batches} training batches "
                f"per epoch: {untrained}; set it to at least {least} or leave it out"
            )
    tests = trainer.get("limit_test_batches")
    if (
        tests is not None
        and not (isinstance(tests, float) and math.isfinite(tests) and 0 < tests <= 1)
        and not (is_int(tests) and tests >= 1)
    ):
        raise ConfigError(
            "trainer.limit_test_batches must be an integer >= 1 (batches) or a fraction in (0, 1], got "
            f"{tests!r}: the run would train, then test on no batch and record no metrics"
        )
    steps = trainer.get("max_steps", -1)
    if steps is not None and steps != -1 and not (is_int(steps) and steps >= 1):
        raise ConfigError(
            f"trainer.max_steps must be -1 (no limit) or an integer >= 1, got {steps!r}"
            + (f": {untrained}" if steps == 0 else "")
        )


def check_device(trainer: Mapping) -> None:
    """``trainer.accelerator`` gpu or cuda (``trainer=gpu``) on a machine without one: one line before the data
    loads (Lightning's MisconfigurationException came after the data and the model, in Hydra's two lines)."""
    import torch

    wanted = str(trainer.get("accelerator", "auto")).lower()
    has = torch.cuda.is_available() or (wanted == "gpu" and torch.backends.mps.is_available())
    if wanted in ("gpu", "cuda") and not has:
        raise ConfigError(
            f"trainer.accelerator={trainer.get('accelerator')} needs a GPU, and torch finds none on this "
            "machine; use trainer.accelerator=auto (trainer=default) to run on the CPU"
        )


def check_manual_optimization(trainer: Mapping, model_name: str, automatic: bool) -> None:
    """A model that runs its own optimisation step (MNP: two optimisers, per-tensor clipping) cannot honour
    the Trainer's gradient accumulation or clipping; Lightning would refuse the first two in ``fit`` with a
    traceback and ignore ``gradient_clip_algorithm``."""
    if automatic:
        return
    why = f"cannot apply to model {model_name}, which runs its own optimisation step"
    accumulate = trainer.get("accumulate_grad_batches", 1)
    if accumulate not in (1, None):
        raise ConfigError(
            f"trainer.accumulate_grad_batches={accumulate} {why}; remove it (a larger "
            "dataset.batch_size gives each step more samples)"
        )
    for key in ("gradient_clip_val", "gradient_clip_algorithm"):
        if trainer.get(key) not in (None, 0, 0.0):
            raise ConfigError(
                f"trainer.{key}={trainer[key]} {why}; remove it and set model.optim.clip_norm=<max norm> "
                "instead (each gradient tensor clipped to that norm)"
            )


def check_accel(accel: Mapping) -> None:
    """``accel``: the values mnp.cli.accel accepts (whether they apply to the model and device is checked there)."""
    if accel.get("cuda_graph", "auto") not in CUDA_GRAPH:
        raise ConfigError(f"accel.cuda_graph must be auto, true, false or emulate, got {accel['cuda_graph']!r}")
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
        raise ConfigError(
            f"{key} is required: add {key}=<value> to the command"
            + (" (the data file, e.g. dataset.path=my_data.npz)" if key == "dataset.path" else "")
        )
    c = OmegaConf.to_container(cfg, resolve=True)
    check_tuned(c)
    check_seed(c.get("seed", 0))  # first: dataset.seed interpolates it
    for group in ("model", "dataset"):
        if isinstance(c.get(group), Mapping):
            check_types(group, c[group])
    check_ranges(c)


def check_stored(run_cfg, ckpt_path) -> None:
    """The stored ``seed`` and ``eval`` (the ``+eval.*`` overrides merged in: those are checked before loading) as
    train.py checks them: an old or edited checkpoint's ``noise_levels: [-1, nan]`` reported ``noise/acc@nan``."""
    try:
        check_seed(run_cfg.get("seed", 0))
        check_eval(
            OmegaConf.to_container(run_cfg.eval, resolve=True)
            if OmegaConf.is_config(run_cfg.get("eval"))
            else run_cfg.get("eval") or {}
        )
    except ValueError as e:
        raise ValueError(f"checkpoint {ckpt_path}: its stored config cannot be evaluated: {e}") from None
