"""The run's result files: ``metrics.json`` (keys in numeric σ order, NaN and inf as null) and
``predictions.npz``, both written atomically."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from datamodules.files import atomic_write


def metric_order(key: str) -> tuple:
    """Sort key: by name, then numerically by the σ after ``@`` (``acc@2.154`` before ``acc@10``)."""
    name, _, level = str(key).partition("@")
    try:
        return name, 0, float(level), ""
    except ValueError:
        return name, 1, 0.0, level


def _finite(v):
    """NaN and ±inf become null: JSON has no such numbers."""
    if isinstance(v, float) and not np.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def write_json(path: Path, obj: dict) -> None:
    ordered = {k: _finite(obj[k]) for k in sorted(obj, key=metric_order)}
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(ordered, indent=2, allow_nan=False)))


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    def w(tmp):
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)

    atomic_write(path, w)


def split_record(dm) -> dict:
    """Which rows the evaluation read, and the validation rows by count and sha256 (the same on every seed)."""
    out = {"eval_split": getattr(dm, "eval_split", "test")}
    val_idx = np.asarray(getattr(dm, "val_idx", []), dtype=np.int64)
    if len(val_idx):
        out.update({"val_rows": len(val_idx), "val_idx_sha256": hashlib.sha256(val_idx.tobytes()).hexdigest()})
    return out
