"""Inference-only MNP settings applied to a trained model: the decoder's S at prediction (``decoder.eval_samples``)
and eq. 8′'s view weighting (``aggregation.view_weighting.*``). ``evaluate.py ckpt_path=… +model.<key>=<value>``
re-scores a checkpoint under them (a default decided after the run, docs/method.md §5.4), and ``mnp.tools.select
infer`` scores them on selection checkpoints. Any other model setting would change what training made: refused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from omegaconf import OmegaConf

from mnp.runs.flat import flatten

INFERENCE_ONLY = {"decoder": ("eval_samples",), "aggregation.view_weighting": ("mode", "quantile", "power")}


def inference_settings(overrides) -> dict[str, dict]:
    """``{part path: {setting: value}}`` of a ``model`` node of overrides; a one-line ValueError for a key that is
    not an inference-only setting."""
    if OmegaConf.is_config(overrides):
        overrides = OmegaConf.to_container(overrides, resolve=True)
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ValueError(
            f"+model must hold inference-only settings (+model.decoder.eval_samples=20), got {overrides!r}"
        )
    out: dict[str, dict] = {}
    for key, value in flatten(dict(overrides or {})).items():
        part, _, setting = key.rpartition(".")
        if setting not in INFERENCE_ONLY.get(part, ()):
            allowed = ", ".join(f"model.{p}.{s}" for p, names in INFERENCE_ONLY.items() for s in names)
            raise ValueError(
                f"model.{key} is not an inference-only setting (it needs training); evaluate takes {allowed}"
            )
        out.setdefault(part, {})[setting] = value
    return out


def apply_inference_settings(model, settings: dict[str, dict], train_views: Sequence | None) -> None:
    """Give a trained model ``settings`` (:func:`inference_settings`; its :meth:`~mnp.model.MNP.apply_inference_settings`,
    with ``train_views``, the datamodule's training rows); a one-line ValueError for a model that has none."""
    if not settings:
        return
    if not hasattr(model, "apply_inference_settings"):
        raise ValueError(f"+model.* settings are MNP's; this checkpoint holds a {type(model).__name__}")
    model.apply_inference_settings(settings, train_views)


def set_inference_settings(model, settings: dict[str, dict], train_views: Sequence | None) -> None:
    """:meth:`mnp.model.MNP.apply_inference_settings`: each part replaced with its new settings; eq. 8′ set to distance
    mode gets its reference d²_ref from ``train_views`` (otherwise the checkpoint's own stays)."""
    for part, values in settings.items():
        model.spec = model.spec.replace(part, **values)  # the part's own checks: one line naming the key
    if "aggregation.view_weighting" in settings and model.spec.aggregation.view_weighting.mode == "distance":
        if not hasattr(model, "distance_ref"):  # a model built without eq. 8′
            model.register_buffer("distance_ref", torch.full((len(model.view_dims),), float("nan")))
        model.update_distance_reference(train_views)
