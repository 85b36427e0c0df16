"""Readers for the multi-view file layouts of shared/data/SOURCES.md, each returning a :class:`RawData`.

- MAT v5, pre-split: ``x{v}_train`` / ``x{v}_test`` (samples × features) + ``gt_train`` / ``gt_test``
  (handwritten_6views.mat, the TMC ``*_train_test.mat`` files).
- MAT v5, ``X`` cell(1,V) + ``gt`` (or 0-based ``Y``): views samples × features (CUB, handwritten.mat)
  or features × samples (PIE, Scene15, Caltech101); the orientation is the axis whose length is N.
- MAT v5 or HDF5 / MATLAB v7.3 with flat keys ``x1..xM`` + ``gt`` (HMDB; h5py reads them transposed).
- ``.npz`` with ``x1..xM`` (N×d), ``y`` (N,) and optional ``train_idx`` / ``test_idx``.

Labels: the base (0 or 1) is decided from the whole file, never per split: labels whose minimum is 1
are MATLAB's 1-based labels and are shifted down by one (``RawData.label_offset``). Views come back as
float64. A split the file gives is named in ``RawData.split``.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Mapping
from pathlib import Path

import h5py
import numpy as np
import scipy.io

from datamodules.base import RawData
from datamodules.checks import check_numeric, check_regular_file, split_indices
from datamodules.errors import DataError, MissingData
from datamodules.npz import ACCEPTED, load_npz

LABEL_KEYS = ("gt", "Y", "y")


def corrupt(path: Path, err: Exception) -> DataError:
    detail = " ".join(f"{type(err).__name__}: {err}".split())[:200]
    return DataError(f"{path}: file is corrupt or truncated ({detail}); re-download or replace it")


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"  # at offset 0, 512, 1024, ... (MATLAB v7.3: 512, after its text header)


def is_hdf5(data: bytes) -> bool:
    offset = 0
    while offset + len(HDF5_SIGNATURE) <= len(data):
        if data[offset : offset + len(HDF5_SIGNATURE)] == HDF5_SIGNATURE:
            return True
        offset = 512 if offset == 0 else 2 * offset
    return False


def read_bytes(path: Path, sha256: dict[str, str]) -> bytes:
    """The bytes of ``path``, read once; their sha256 goes into ``sha256`` under the absolute path. A run records
    the hash of what it parsed, not of what the file holds later (another process may replace it meanwhile)."""
    data = path.read_bytes()
    sha256[str(path.absolute())] = hashlib.sha256(data).hexdigest()
    return data


def read_file(path: str | Path) -> RawData:
    """Read any supported layout from the file's bytes, read once (their sha256 in ``RawData.sha256``);
    unreadable files raise a one-line :class:`DataError`."""
    path = Path(path)
    check_regular_file(path)
    if not path.is_file():
        raise MissingData(f"{path.name} not found in {path.parent}/")
    suffix = path.suffix.lower()
    if suffix not in {".npz", ".mat", ".h5", ".hdf5"}:
        raise DataError(f"{path}: unsupported file type '{suffix}'; accepted: {ACCEPTED}")
    sha256: dict[str, str] = {}
    data = read_bytes(path, sha256)
    try:
        if suffix == ".npz":
            raw = read_npz(path, data)
        elif is_hdf5(data):
            raw = read_hdf5(path, data)
        else:
            raw = read_mat(path, data)
    except (DataError, MemoryError):  # a file too large for the memory is not a damaged one
        raise
    except Exception as e:  # scipy / h5py / zipfile raise assorted types for damaged files
        if suffix == ".mat" and not data.startswith(b"MATLAB") and not is_hdf5(data):
            raise DataError(
                f"{path}: not a MATLAB .mat file (no 'MATLAB 5.0 MAT-file' header, not HDF5/v7.3); "
                f"write it with scipy.io.savemat or MATLAB's save, or use another format: {ACCEPTED}"
            ) from None
        raise corrupt(path, e) from None
    raw.sha256 = sha256
    return raw


# ---------------------------------------------------------------------------- label and view helpers
def labels(raw, source: str) -> tuple[np.ndarray, int]:
    """Integer labels (N,) from a column/row vector, shifted to 0-based if the whole file is 1-based, and the
    shift (1 or 0)."""
    y = np.asarray(raw)
    if y.ndim > 2 or (y.ndim == 2 and min(y.shape) > 1):
        raise DataError(f"{source}: labels have shape {y.shape}; expected a vector of N labels")
    y = y.ravel()
    if len(y) == 0:
        raise DataError(f"{source}: the label vector is empty")
    if not np.issubdtype(y.dtype, np.number) or np.issubdtype(y.dtype, np.complexfloating):
        raise DataError(f"{source}: labels must be integers, got dtype {y.dtype}")
    yf = y.astype(np.float64)
    if not np.all(np.isfinite(yf)) or not np.all(yf == np.round(yf)):
        bad = int(np.flatnonzero(~np.isfinite(yf) | (yf != np.round(yf)))[0])
        raise DataError(f"{source}: labels must be integers (row {bad} is {y[bad]})")
    if yf.min() < 0:
        raise DataError(f"{source}: labels must be non-negative (row {int(yf.argmin())} is {int(yf.min())})")
    y = yf.astype(np.int64)
    return (y - 1, 1) if y.min() == 1 else (y, 0)


def orient(x, n: int, source: str, name: str, auto: bool = True) -> np.ndarray:
    """A 2-D view as samples × features: the axis of length ``n`` (the label count) is the sample axis.

    ``auto=False``: the layout is known to be samples × features, only the row count is checked.
    """
    x = np.asarray(x)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise DataError(f"{source}: view {name} has shape {x.shape}; expected a 2-D matrix")
    check_numeric(x, source, name)
    rows, cols = x.shape
    if not auto and rows != n:
        raise DataError(
            f"{source}: view {name} has shape {x.shape} but there are {n} labels; expected samples × features"
        )
    if auto and rows == n and cols == n:
        raise DataError(
            f"{source}: view {name} is {n}×{n}, so samples and features cannot be told apart; "
            "save it as samples × features in a .npz (x1..xM, y)"
        )
    if rows != n and cols != n:
        raise DataError(
            f"{source}: view {name} has shape {x.shape} but there are {n} labels; "
            "the row counts of the views and labels do not match"
        )
    return (x if rows == n else x.T).astype(np.float64)


def numbered(keys, pattern: str) -> list[int]:
    """The sorted view numbers v of keys matching ``pattern`` (e.g. ``x(\\d+)_train``)."""
    return sorted(int(m.group(1)) for k in keys if (m := re.fullmatch(pattern, k)))


def label_key(d: Mapping, source: str) -> str:
    for k in LABEL_KEYS:
        if k in d:
            return k
    raise DataError(f"{source}: no label key found (looked for {', '.join(LABEL_KEYS)}); keys are {sorted(d)}")


def check_consecutive(vs: list[int], source: str, what: str) -> None:
    if vs != list(range(1, len(vs) + 1)):
        raise DataError(f"{source}: view keys {what} are numbered {vs}; expected 1..{len(vs)}")


# ---------------------------------------------------------------------------- layouts
def from_mapping(d: Mapping, source: str) -> RawData:
    """Dispatch on the keys of a loaded .mat dict (pre-split, ``X`` cell or flat ``x1..xM``)."""
    if numbered(d, r"x(\d+)_train"):
        return pre_split(d, source)
    if "X" in d:
        y, offset = labels(d[label_key(d, source)], source)
        cells = np.asarray(d["X"])
        views = list(cells.ravel()) if cells.dtype == object else [cells]
        return RawData(
            [orient(x, len(y), source, str(v + 1)) for v, x in enumerate(views)], y, source=source, label_offset=offset
        )
    vs = numbered(d, r"x(\d+)")
    if vs:
        check_consecutive(vs, source, "x1..xM")
        y, offset = labels(d[label_key(d, source)], source)
        return RawData([orient(d[f"x{v}"], len(y), source, f"x{v}") for v in vs], y, source=source, label_offset=offset)
    keys = sorted(k for k in d if not k.startswith("__"))
    raise DataError(
        f"{source}: unknown layout with keys {keys}; expected x1_train.. + gt_train/gt_test, "
        "X (cell) + gt, or x1..xM + gt"
    )


def pre_split(d: Mapping, source: str) -> RawData:
    """``x{v}_train`` / ``x{v}_test`` + ``gt_train`` / ``gt_test``: train rows first, then test rows."""
    vs = numbered(d, r"x(\d+)_train")
    check_consecutive(vs, source, "x*_train")
    for key in [f"x{v}_test" for v in vs] + ["gt_train", "gt_test"]:
        if key not in d:
            raise DataError(f"{source}: pre-split file lacks key '{key}'")
    gt_train, gt_test = np.asarray(d["gt_train"]).ravel(), np.asarray(d["gt_test"]).ravel()
    y, offset = labels(np.concatenate([gt_train, gt_test]), source)  # label base from the whole file
    n_train, n_test = len(gt_train), len(gt_test)
    views = []
    for v in vs:
        tr = orient(d[f"x{v}_train"], n_train, source, f"x{v}_train", auto=False)
        te = orient(d[f"x{v}_test"], n_test, source, f"x{v}_test", auto=False)
        if tr.shape[1] != te.shape[1]:
            raise DataError(
                f"{source}: view {v} has {tr.shape[1]} features in x{v}_train but {te.shape[1]} in "
                f"x{v}_test; train and test must have the same dims"
            )
        views.append(np.concatenate([tr, te]))
    idx = np.arange(n_train + n_test)
    return RawData(
        views,
        y,
        idx[:n_train],
        idx[n_train:],
        source=source,
        split="the file's x*_train / x*_test",
        label_offset=offset,
    )


def read_mat(path: Path, data: bytes) -> RawData:
    d = scipy.io.loadmat(io.BytesIO(data))
    return from_mapping(d, str(path))


def read_hdf5(path: Path, data: bytes) -> RawData:
    """MATLAB v7.3: arrays come back transposed; cell arrays hold object references."""
    with h5py.File(io.BytesIO(data), "r") as f:
        d = {}
        for k, ds in f.items():
            if not isinstance(ds, h5py.Dataset):
                continue
            if ds.dtype == h5py.ref_dtype:
                refs = ds[()].ravel()
                d[k] = np.empty(len(refs), dtype=object)
                for i, r in enumerate(refs):
                    d[k][i] = f[r][()].T
            else:
                d[k] = ds[()].T
    return from_mapping(d, str(path))


def read_npz(path: Path, data: bytes) -> RawData:
    source = str(path)
    d = load_npz(path, data)  # reads every member: damaged archives fail here
    if "y" not in d:
        raise DataError(f"{source}: .npz needs keys x1..xM and y (optional train_idx, test_idx); keys are {sorted(d)}")
    vs = numbered(d, r"x(\d+)")
    if not vs:
        raise DataError(f"{source}: .npz has no views x1..xM; keys are {sorted(d)}")
    check_consecutive(vs, source, "x1..xM")
    y, offset = labels(d["y"], source)
    views = []
    for v in vs:
        x = np.asarray(d[f"x{v}"])
        if x.ndim != 2 or x.shape[0] != len(y):
            raise DataError(f"{source}: view x{v} has shape {x.shape}; expected ({len(y)}, d) to match y")
        check_numeric(x, source, f"x{v}")
        views.append(x.astype(np.float64))
    train_idx, test_idx = (
        split_indices(d.get("train_idx"), d.get("test_idx"), len(y), source)
        if "train_idx" in d or "test_idx" in d
        else (None, None)
    )
    return RawData(
        views, y, train_idx, test_idx, source=source, split="the file's train_idx / test_idx", label_offset=offset
    )


def read_index(path: Path, sha256: dict[str, str]) -> np.ndarray:
    """A ``.npy`` array of split indices (the sha256 of the bytes read into ``sha256``); damaged files raise a
    one-line :class:`DataError`."""
    data = read_bytes(Path(path), sha256)
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as e:
        raise corrupt(path, e) from None
