"""Configs and checkpoints written by older versions of the project, read as today's.

MNP took 50 flat constructor arguments (``memory_size``, ``view_weighting``, ...) before it was built from its parts
(:mod:`mnp.model.parts`, issue 33). A checkpoint's constructor arguments and a run directory's ``config.yaml`` from then
hold the flat keys; :func:`nest_flat` moves each into its part's node (``memory_size`` -> ``memory.size``), so an old
checkpoint loads (:mod:`mnp.runs.stored_config`) and an old run directory compares equal to today's job of the same
settings (:mod:`mnp.runs.rundir`, ``--relabel``). The mapping is data about the registered class ``mnp.model.MNP``,
named by its target as :mod:`mnp.runs.stored_config` names it, so the framework needs no import of the model.

The modules moved into their rooms (issue 45: ``mnp.core.wandb_utils`` is ``mnp.cli.wandb_utils``, ``mnp.parts`` is
``mnp.model.parts``); a run's ``config.yaml`` from before names the old paths in its ``_target_`` keys (the wandb
logger's), which :func:`upgrade_run_config` rewrites (:func:`modern_target`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

MNP_TARGET = "mnp.model.MNP"
# MNP's part nodes (mnp.model.parts.PARTS), and each flat argument of before the parts -> (its part's node, setting)
PART_NODES = ("encoder", "attention", "aggregation", "memory", "decoder", "loss", "optim", "warmup")
FLAT = {
    **{
        k: ("encoder", k)
        for k in (
            "d_e",
            "projection",
            "resmlp_depth",
            "merge",
            "y_embed_dim",
            "norm",
            "norm_eps",
            "bn_momentum",
            "prior",
        )
    },
    **{
        k: ("attention", k)
        for k in ("similarity", "lengthscale_init", "lengthscale_param", "lengthscale_form", "amplitude")
    },
    "attention_norm": ("attention", "normaliser"),
    "aggregation": ("aggregation", "kind"),
    "view_weighting": ("aggregation.view_weighting", "mode"),
    "distance_quantile": ("aggregation.view_weighting", "quantile"),
    "distance_power": ("aggregation.view_weighting", "power"),
    "modality_mask": ("aggregation", "modality_mask"),
    "view_dropout": ("aggregation", "view_dropout"),
    "sigma_as_std": ("decoder", "sigma_as_std"),
    "num_samples": ("decoder", "num_samples"),
    "eval_samples": ("decoder", "eval_samples"),
    "scale_floor": ("decoder", "scale_floor"),
    "train_decoder": ("decoder", "train"),
    "ty_loss": ("loss", "ty"),
    "view_loss_weight": ("loss", "view_weight"),
    **{
        k: ("loss", k)
        for k in (
            "alpha",
            "beta",
            "tau",
            "rbf_reduce",
            "lengthscale_penalty",
            "self_in_denominator",
            "l2",
            "label_smoothing",
        )
    },
    **{f"memory_{k}": ("memory", k) for k in ("size", "init", "trainable", "update", "jstar", "write")},
    **{f"warmup_{k}": ("warmup", k) for k in ("epochs", "lr", "end_factor", "fraction")},
    "clip_norm": ("optim", "clip_norm"),
    "lengthscale_lr_scale": ("optim", "lengthscale_lr_scale"),
}


_ROOMS = {
    "framework": "routine probabilities domains",
    "eval": "metrics protocols eval_protocol missing per_view calibration conformal posthoc figures wandb_tables rng",
    "runs": "rundir runrecord checkpointing stored_config stored_prep csv_history outputs signals naming summary places "
    "codeversion migrations",
    "cli": "pipeline builders validate cli help errors console startup progress sweep oom resources wandb_utils "
    "callbacks accel predictor",
    "model": "inference_settings",
}
_MODEL_MODULES = "parts context_cache memory attention aggregation view_weighting view_predictions view_training "
_MODEL_MODULES += "encoders decoder losses stacked step_graphs"
# a module's dotted path before issue 45 -> today's
MOVED_MODULES = {
    **{f"mnp.core.{m}": f"mnp.{room}.{m}" for room, names in _ROOMS.items() for m in names.split()},
    **{f"mnp.{m}": f"mnp.model.{m}" for m in _MODEL_MODULES.split()},
    "mnp.model_training": "mnp.model.training",
    "mnp.optim": "mnp.framework.optim",
}


def modern_target(path: str) -> str:
    """A dotted path a stored config names (``mnp.core.wandb_utils.RunLogger``) as today's; others as they are."""
    module, dot, name = path.rpartition(".")
    return f"{MOVED_MODULES[module]}{dot}{name}" if module in MOVED_MODULES else path


def _modern_targets(node):
    if isinstance(node, Mapping):
        return {
            k: modern_target(v) if k == "_target_" and isinstance(v, str) else _modern_targets(v)
            for k, v in node.items()
        }
    return [_modern_targets(v) for v in node] if isinstance(node, list) else node


def _is_flat(key: str, value) -> bool:  # ``aggregation`` is a flat key (its kind) and a part's node
    return key in FLAT and not (key in PART_NODES and isinstance(value, Mapping))


def merge_into(into: dict, node: Mapping) -> None:
    """``node``'s settings put into ``into``, depth first (a nested mapping merges, anything else replaces)."""
    for key, value in node.items():
        if isinstance(value, Mapping) and isinstance(into.get(key, {}), dict):
            merge_into(into.setdefault(key, {}), value)
        else:
            into[key] = value


def nest_flat(node: Mapping) -> dict:
    """An MNP node (constructor arguments or a run config's ``model``) written before the parts, with its flat keys
    moved into their parts' nodes (``memory_size`` -> ``memory.size``); a node without flat keys is returned as is."""
    if not any(_is_flat(k, v) for k, v in node.items()):
        return dict(node)
    out = {k: v for k, v in node.items() if not _is_flat(k, v) and k not in PART_NODES}
    for key, value in node.items():  # the part nodes first, so that a flat key given beside its part wins
        if key in PART_NODES and not _is_flat(key, value):
            if isinstance(value, Mapping) or value is None:
                merge_into(out.setdefault(key, {}), value or {})
            else:  # a part object: as given
                out[key] = value
    for key, value in node.items():
        if _is_flat(key, value):
            path, setting = FLAT[key]
            target = out
            for p in path.split("."):
                target = target.setdefault(p, {})
            target[setting] = value
    return out


def modern_key(key: str) -> str:
    """A flat MNP key of a run from before the parts as today's (``model.memory_size`` -> ``model.memory.size``)."""
    flat = key.removeprefix("model.")
    return f"model.{'.'.join(FLAT[flat])}" if key.startswith("model.") and flat in FLAT else key


MOVED = "MNP's flat settings moved into its parts' nodes (docs/usage.md)"


def _moved(name: str) -> bool:  # ``aggregation`` is a part's node today: a bad value of it is no old key
    return name in FLAT and name not in PART_NODES


def moved_key(key: str, value) -> str | None:
    """The one line for a flat MNP key of before the parts given to a run (``model.memory_size``; ``value`` as the
    command wrote it, or a config value), naming today's key; None for any other key."""
    if not (key.startswith("model.") and _moved(key.removeprefix("model."))):
        return None
    written = value if isinstance(value, str) else json.dumps(value)
    return f"{key} is not a key of the model: {MOVED}, give {modern_key(key)}={written}"


def moved_argument(name: str, value) -> str | None:
    """The one line for a flat keyword argument of before the parts given to ``MNP(...)`` (``memory_size=30``),
    naming today's argument (``memory={'size': 30}``); None for any other argument."""
    if not _moved(name):
        return None
    given = ", ".join(f"{k}={v!r}" for k, v in nest_flat({name: value}).items())
    return f"MNP() got an unexpected keyword argument {name!r}: {MOVED}, give {given}"


def refusing_flat(init):
    """``MNP.__init__`` naming today's argument for a flat keyword of before the parts, where Python would say only
    that it is unexpected; its signature and annotations stay ``init``'s (``functools.wraps``)."""

    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        for name, value in kwargs.items():
            if line := moved_argument(name, value):
                raise TypeError(line)
        return init(self, *args, **kwargs)

    return checked


def modern_variant(variant: str) -> str:
    """A recorded variant label (``k=v,k2=v2``) with today's keys, for display."""
    return ",".join(modern_key(k) + eq + v for k, eq, v in (item.partition("=") for item in variant.split(",")))


def under_built_in(built_in: Mapping, saved, keep: Mapping | None = None) -> dict:
    """``saved`` (a part's node in a run's config) over ``built_in`` (the part's defaults, nested alike): the settings
    the run used, since a switch added after it keeps the old behaviour at its built-in default. ``keep``: fill only
    the keys it has (today's node, nested alike)."""
    saved = saved if isinstance(saved, Mapping) else {}
    out = {k: v for k, v in built_in.items() if k not in saved and (keep is None or k in keep)}
    for k, v in saved.items():
        inner = None if keep is None else keep.get(k) if isinstance(keep.get(k), Mapping) else {}
        out[k] = under_built_in(built_in[k], v, inner) if isinstance(built_in.get(k), Mapping) else v
    return out


def upgrade_run_config(config: dict) -> dict:
    """A run's saved config with today's module paths in its ``_target_`` keys and an MNP ``model`` node of before
    the parts nested (other models: as it is)."""
    if not isinstance(config, dict):
        return config
    config = _modern_targets(config)
    model = config.get("model")
    if not isinstance(model, Mapping) or model.get("_target_") != MNP_TARGET:
        return config
    return {**config, "model": nest_flat(model)}


def upgrade_hparams(target: str, hparams: Mapping) -> dict:
    """A checkpoint's constructor arguments for the model class ``target``, as today's constructor takes them."""
    return nest_flat(hparams) if target == MNP_TARGET else dict(hparams)
