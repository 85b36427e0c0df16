"""A checkpoint's stored preprocessing (``PREP_KEY``) and weights, checked before :mod:`mnp.cli.predictor` uses them.

The preprocessing is read from a file a user may have edited or damaged; a NaN shift would silently turn a view
into a missing one, a negative scale would flip its features (round 5: L31a-L31h). Each value is checked against
the restored model, and a fault is refused in one line naming the checkpoint and the value.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from mnp.checks import is_int
from mnp.runs.checkpointing import CheckpointError

SCALINGS = ("minmax", "standard", "none")
FIELDS = ("scaling", "scale_test_separately", "shift", "scale", "labels", "eval_batch_size")


def _inconsistent(path, what: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {path}: its stored preprocessing is inconsistent: {what}; it was changed after train.py "
        "wrote it, or not written by it"
    )


def _scalers(prep: Mapping, key: str, dims: list[int], path) -> None:
    """The stored ``shift`` or ``scale``: one finite vector per view of the model, of its view's width."""
    value = prep[key]
    if not isinstance(value, (list, tuple)) or len(value) != len(dims):
        n = f"{len(value)} views" if isinstance(value, (list, tuple)) else f"a {type(value).__name__}"
        raise _inconsistent(path, f"its {key} holds {n}, but the model has {len(dims)} views")
    for v, (s, d) in enumerate(zip(value, dims)):
        name = f"the {key} of view x{v + 1}"
        try:
            a = np.asarray(s, dtype=np.float64)
        except (TypeError, ValueError):
            raise _inconsistent(path, f"{name} is a {type(s).__name__}, not numbers") from None
        if a.shape != (d,):
            raise _inconsistent(path, f"{name} has shape {a.shape}, but the model's view x{v + 1} has {d} columns")
        bad = ~np.isfinite(a) | (a <= 0 if key == "scale" else False)
        if bad.any():
            c = int(bad.argmax())
            rule = "a scale must be finite and > 0" if key == "scale" else "a shift must be finite"
            raise _inconsistent(path, f"{name} is {a[c]} in column {c} ({rule})")


def checked_preprocessing(prep, model, path) -> Mapping:
    """``prep`` when every stored value agrees with ``model`` (its views, their widths, its classes), else a
    :class:`CheckpointError` naming ``path`` and the first value that does not."""
    if not isinstance(prep, Mapping):
        raise _inconsistent(path, f"it is a {type(prep).__name__}, not a mapping")
    if missing := [k for k in FIELDS if k not in prep]:
        raise _inconsistent(path, f"it has no {missing[0]!r}")
    if prep["scaling"] not in SCALINGS:
        raise _inconsistent(path, f"its scaling is {prep['scaling']!r}, not one of {', '.join(SCALINGS)}")
    if not isinstance(prep["scale_test_separately"], bool):
        raise _inconsistent(path, f"its scale_test_separately is {prep['scale_test_separately']!r}, not a bool")
    batch = prep["eval_batch_size"]
    if not is_int(batch) or batch < 1:
        raise _inconsistent(path, f"its eval_batch_size is {batch!r}, not an integer >= 1")
    for key in ("shift", "scale"):
        _scalers(prep, key, model.view_dims, path)
    labels = np.asarray(prep["labels"])
    if labels.ndim != 1 or len(labels) != model.num_classes:
        raise _inconsistent(
            path, f"its labels have shape {labels.shape}, but the model predicts {model.num_classes} classes"
        )
    return prep


def check_finite_weights(model, path) -> None:
    """A :class:`CheckpointError` when a weight is not finite: MNP's sparsemax failed on it with a raw
    RuntimeError and the other models predicted NaN rows (round 5: L31j)."""
    for name, weight in model.named_parameters():
        if (bad := int((~torch.isfinite(weight)).sum())) > 0:
            raise CheckpointError(
                f"checkpoint {path}: its weight {name} holds {bad} non-finite values of {weight.numel()}, so "
                "the model cannot predict (its training diverged, or the file is damaged); use an earlier checkpoint"
            )
