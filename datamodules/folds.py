"""Stratified k-fold cross-validation on the training rows (the tuning experiment, docs/tuning.md).

Fold ``f`` of ``k`` holds out about 1/k of every class's training rows as validation rows; the k folds partition
the training rows, and they depend on ``seed`` alone, so every model and every trial of a study is scored on the
same folds. scikit-learn's :class:`~sklearn.model_selection.StratifiedKFold` draws them.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.model_selection import StratifiedKFold

from datamodules.errors import DataError
from mnp.checks import is_int


def check_folds(folds: int, fold: int) -> tuple[int, int]:
    """``dataset.cv_folds`` (0: off, else >= 2) and ``dataset.cv_fold`` in [0, folds)."""
    for key, v in (("cv_folds", folds), ("cv_fold", fold)):
        if not is_int(v):
            raise DataError(f"dataset.{key} must be an integer, got {v!r}")
    if folds == 1 or folds < 0:
        raise DataError(f"dataset.cv_folds must be 0 (no cross-validation) or an integer >= 2, got {folds}")
    if folds and not 0 <= fold < folds:
        raise DataError(f"dataset.cv_fold must lie in [0, {folds - 1}] for dataset.cv_folds={folds}, got {fold}")
    return int(folds), int(fold)


def kfold_split(y: np.ndarray, folds: int, fold: int, seed: int, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Local indices (into ``y``) of the training and validation rows of fold ``fold`` of ``folds``."""
    counts = np.bincount(np.unique(y, return_inverse=True)[1])
    if counts.min() < 2:
        raise DataError(
            f"{source}: cross-validation needs at least 2 training rows of every class (the least has "
            f"{counts.min()}): a class with one row would be missing from some fold's training rows"
        )
    with warnings.catch_warnings():  # fewer rows of a class than folds: some folds hold none of it, as intended
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        splits = list(StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))
    train, val = splits[fold]
    return np.sort(train), np.sort(val)
