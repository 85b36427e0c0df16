"""Checks of a datamodule's inputs: its config values, the dtypes and values of views and labels.
Each failure is a one-line :class:`DataError` naming the key, file, view or row and what to do; odd but
usable data (a constant view) gets a one-line warning."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from datamodules.errors import DataError
from datamodules.npz import ACCEPTED
from mnp.checks import check_fraction, check_int

log = logging.getLogger(__name__)

SPECIAL_FILES = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def positive_int(key: str, value) -> int:
    """``dataset.<key>`` as an int >= 1, else a DataError naming the key."""
    return check_int(f"dataset.{key}", value, 1, error=DataError)


def fraction(key: str, value, lower_open: bool) -> float:
    """``dataset.<key>`` as a float in [0, 1) (or (0, 1) with ``lower_open``), else a DataError naming the key."""
    return check_fraction(f"dataset.{key}", value, lower_open=lower_open, error=DataError)


def link_fault(path: Path) -> str | None:
    """What a symbolic link that loops or points nowhere is, in words (such a path was reported as not found);
    None for any other path."""
    if path.is_symlink():
        try:
            os.stat(path)
        except OSError as e:
            if e.errno == errno.ELOOP:
                return "a loop of symbolic links"
            return f"a symbolic link to {os.readlink(path)}, which does not exist"
    return None


def check_regular_file(path: Path) -> None:
    """A DataError when ``path`` exists but is no regular file: a directory, or a FIFO, device or socket, whose
    reading would block or never end (it used to be reported as not found)."""
    if what := link_fault(path):
        raise DataError(f"{path} is {what}; point it at the data file")
    if path.is_dir():
        raise DataError(f"{path} is a directory, not a data file; accepted: {ACCEPTED}")
    if path.exists() and not path.is_file():
        mode = path.stat().st_mode
        kind = next((k for special, k in SPECIAL_FILES if special(mode)), "a special file")
        raise DataError(f"{path} is {kind}, not a regular data file; accepted: {ACCEPTED}")


def check_numeric(x: np.ndarray, source: str, name: str) -> None:
    """A DataError unless view ``name`` holds real numbers or booleans (complex, objects and strings fail)."""
    if x.dtype.hasobject:
        raise DataError(f"{source}: view {name} holds Python objects (dtype object); save numeric arrays")
    if np.issubdtype(x.dtype, np.complexfloating):
        raise DataError(
            f"{source}: view {name} is complex-valued (dtype {x.dtype}); its imaginary part would be "
            "lost: save real features (e.g. the real and imaginary parts as separate columns)"
        )
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
        raise DataError(f"{source}: view {name} has non-numeric dtype {x.dtype}")


def validate_arrays(views: Sequence[np.ndarray], y: np.ndarray, source: str) -> None:
    """Raise :class:`DataError` on NaN/inf, empty or mismatched views, and non-integer labels."""
    if len(views) == 0:
        raise DataError(f"{source}: no views found")
    n = len(y)
    for v, x in enumerate(views):
        if x.ndim != 2:
            raise DataError(f"{source}: view {v + 1} has shape {x.shape}; expected samples × features")
        if x.shape[1] == 0:
            raise DataError(f"{source}: view {v + 1} has zero feature columns")
        if x.shape[0] != n:
            raise DataError(f"{source}: view {v + 1} has {x.shape[0]} rows but there are {n} labels")
        bad = ~np.isfinite(x)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise DataError(
                f"{source}: view {v + 1} has {int(bad.sum())} NaN/inf values (first at row {r}, column {c}); "
                "clean or impute the features first"
            )
    yf = np.asarray(y)
    if (
        not np.issubdtype(yf.dtype, np.number)
        or not np.all(np.isfinite(yf.astype(float)))
        or not np.all(yf.astype(float) == np.round(yf.astype(float)))
    ):
        raise DataError(f"{source}: labels must be integers (got dtype {yf.dtype}, e.g. {yf.ravel()[:3].tolist()})")
    if yf.min() < 0:
        raise DataError(f"{source}: labels must be non-negative, found {int(yf.min())}")


def warn_constant_views(views: Sequence[np.ndarray], source: str) -> list[int]:
    """Warn, one line per view, about a view whose rows are all equal (all zero, or one value per column): it
    carries no information, so the model learns nothing from it (it is kept). Returns those views' numbers."""
    constant = [v + 1 for v, x in enumerate(views) if len(x) > 1 and np.array_equal(x.min(0), x.max(0))]
    for v in constant:
        x = views[v - 1]
        what = "all zero" if not x[0].any() else f"constant (all {len(x)} rows the same)"
        log.warning(
            "%s: view %d (%d columns) is %s: it carries no information, so the model learns nothing from "
            "it; it is kept",
            source,
            v,
            x.shape[1],
            what,
        )
    return constant


def split_indices(train, test, n: int, source: str, empty_test: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A given train/test split as int64 arrays, else a DataError: both given, integers in 0..n-1 (a negative
    index is not counted from the end), each sample at most once, train and test disjoint, neither empty
    (``empty_test``: the test indices may be empty, for in-memory data fitted alone). The one check of split
    indices: of files (.npz keys, registered index files) and of in-memory arrays (``TensorDataModule``)."""
    if train is None or test is None:
        raise DataError(f"{source}: give both train_idx and test_idx, or neither")
    out = []
    for name, idx in (("train", train), ("test", test)):
        idx = np.asarray(idx).ravel()
        if len(idx) == 0 and name == "test" and empty_test:
            out.append(np.empty(0, dtype=np.int64))
            continue
        if len(idx) == 0:
            raise DataError(f"{source}: {name} indices are empty")
        if not np.issubdtype(idx.dtype, np.integer):
            raise DataError(f"{source}: {name} indices must be integers, got dtype {idx.dtype}")
        if idx.min() < 0 or idx.max() >= n:
            raise DataError(
                f"{source}: {name} indices span {idx.min()}..{idx.max()} but there are {n} samples "
                f"(expected 0-based indices in 0..{n - 1}; a negative one is not counted from the end)"
            )
        values, counts = np.unique(idx, return_counts=True)
        if (counts > 1).any():
            raise DataError(
                f"{source}: {int((counts > 1).sum())} samples occur more than once in the {name} indices "
                f"(e.g. {values[counts > 1][0]}, {counts.max()} times); give each sample once"
            )
        out.append(idx.astype(np.int64))
    both = np.intersect1d(*out)
    if len(both):
        raise DataError(f"{source}: {len(both)} samples are in both the train and test indices (e.g. {both[0]})")
    return out[0], out[1]


def describe_absent(classes: np.ndarray, show: int = 5) -> str:
    """The labels of 0..max that never occur among the sorted ``classes`` ("" if none): all of them, or
    the first ``show`` and their count. The range is never built, so a label of 10⁹ costs nothing."""
    count, first, prev = int(classes[-1]) + 1 - len(classes), [], -1
    for c in classes.tolist():
        first += range(prev + 1, min(c, prev + 1 + show - len(first)))
        prev = c
    if count <= show:
        return str(first) if count else ""
    return f"[{', '.join(map(str, first))}, ...] ({count} in all)"


def empty_test_hint(from_files: bool, largest: int, test_fraction: float) -> str:
    """Why the test split is empty and what to do (``largest``: the size of the largest class)."""
    if from_files:
        return "the split's test indices hold no sample outside dataset.ood_classes; give test samples"
    if largest < 2:
        return "every class has one sample, which stays in training; add samples"
    return (
        f"dataset.test_fraction={test_fraction} of at most {largest} samples per class rounds to 0; "
        "add samples or raise it (+dataset.test_fraction=...)"
    )


def row_keys(views: Sequence[np.ndarray]) -> list[bytes]:
    """One digest per sample of its rows in every view: equal digests, a sample equal in every view."""
    keys = []
    for i in range(len(views[0])):
        h = hashlib.blake2b(digest_size=16)
        for x in views:
            h.update(np.ascontiguousarray(x[i]).tobytes())
        keys.append(h.digest())
    return keys


def warn_duplicates(views: Sequence[np.ndarray], source: str, train_idx: np.ndarray, test_idx: np.ndarray) -> int:
    """Log a warning naming how many samples repeat an earlier one, and how many of the test rows equal a
    training row (``train_idx``: every row the model learns from) in the split actually used: that leakage
    inflates the test scores. They are kept. Returns the number of repeats."""
    keys = row_keys(views)
    repeats = len(keys) - len(set(keys))
    if repeats:
        seen = {keys[i] for i in train_idx}
        leaked = sum(keys[i] in seen for i in test_idx)
        log.warning(
            "%s: %d samples duplicate an earlier sample in every view (%d of the %d test rows equal a "
            "training row%s); they are kept",
            source,
            repeats,
            leaked,
            len(test_idx),
            ", so the test scores are inflated by that leakage" if leaked else "",
        )
    return repeats
