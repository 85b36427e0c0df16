"""The multi-view datamodule every dataset builds on.

A batch is ``(views: list[Tensor], y: Tensor)``. Data is held as in-memory tensors and batched by
index (no per-sample collation). Subclasses implement :meth:`load` returning a :class:`RawData`;
everything else (validation, splits, held-out-class OOD, train-only scaling) happens here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from datamodules.checks import (
    check_numeric,
    describe_absent,
    empty_test_hint,
    fraction,
    positive_int,
    split_indices,
    validate_arrays,
    warn_constant_views,
    warn_duplicates,
)
from datamodules.errors import DataError
from datamodules.folds import check_folds, kfold_split
from datamodules.loaders import index_loader

log = logging.getLogger(__name__)


@dataclass
class RawData:
    """Views (N×d_v float arrays), 0-based integer labels (N,), optional split indices (``split``: where they
    came from, for the load line), OOD views, and ``label_offset``: 1 where the file's labels were 1-based."""

    views: list[np.ndarray]
    y: np.ndarray
    train_idx: np.ndarray | None = None
    test_idx: np.ndarray | None = None
    source: str = "<memory>"
    external_ood: dict[str, list[np.ndarray]] = field(default_factory=dict)
    split: str = "given with the data"
    label_offset: int = 0
    sha256: dict[str, str] = field(default_factory=dict)  # {absolute path: sha256 of the bytes read} of its files


# not sklearn (issue 33): train_test_split(stratify=y) draws other rows, and its scalers differ by a few ulp
def stratified_split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-class random split; every class keeps at least one training sample."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for k in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == k))
        n_test = int(round(len(idx) * test_fraction))
        n_test = min(n_test, len(idx) - 1)
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


class Scaler:
    """Per-view min-max or standard scaling fitted on one set of rows."""

    def __init__(self, kind: str):
        if kind not in {"minmax", "standard", "none"}:
            raise DataError(f"unknown scaling '{kind}'; choose minmax, standard or none")
        self.kind = kind

    @np.errstate(over="ignore", invalid="ignore")  # overflow shows as non-finite output, reported by the caller
    def fit(self, x: np.ndarray) -> Scaler:
        if self.kind == "minmax":
            self.shift, span = x.min(0), x.max(0) - x.min(0)
        elif self.kind == "standard":
            self.shift, span = x.mean(0), x.std(0)
        else:
            self.shift, span = np.zeros(x.shape[1]), np.ones(x.shape[1])
        self.scale = np.where(span > 0, span, 1.0)  # constant columns map to 0, never NaN
        return self

    @np.errstate(over="ignore", invalid="ignore")
    def transform(self, x: np.ndarray) -> np.ndarray:
        return (x - self.shift) / self.scale

    def finite(self) -> bool:
        """False when fitting overflowed (a huge view's mean, span or spread is inf or NaN)."""
        return bool(np.isfinite(self.shift).all() and np.isfinite(self.scale).all())


class MultiViewDataModule(pl.LightningDataModule):
    """Splits, validation, held-out-class OOD and train-only scaling for multi-view features."""

    name = "multiview"
    # settings that change only how the test split is read (the training and validation rows stay as they are), so
    # no validation score can choose them: the selection protocol leaves them out of a rival's setting
    TEST_ONLY = ("scale_test_separately",)

    def __init__(
        self,
        batch_size: int = 200,
        eval_batch_size: int = 1000,
        scaling: str = "minmax",
        scale_test_separately: bool = False,
        val_fraction: float = 0.0,
        test_fraction: float = 0.2,
        use_split_files: bool = True,
        ood_classes: Sequence[int] | None = None,
        seed: int = 0,
        shuffle: bool = True,
        full_batches: bool = False,
        val_seed: int = 0,
        cv_folds: int = 0,
        cv_fold: int = 0,
    ):
        super().__init__()
        self.full_batches = bool(full_batches)  # official: N // batch_size full batches per epoch from a stream
        self.batch_size = positive_int("batch_size", batch_size)
        self.eval_batch_size = positive_int("eval_batch_size", eval_batch_size)
        self.scaling, self.scale_test_separately = scaling, scale_test_separately
        self.val_fraction = fraction("val_fraction", val_fraction, lower_open=False)
        self.test_fraction = fraction("test_fraction", test_fraction, lower_open=True)
        self.use_split_files = use_split_files
        self.ood_classes = sorted(int(c) for c in (ood_classes or []))
        self.seed, self.shuffle = int(seed), shuffle
        self.val_seed = int(val_seed)  # the validation rows are fixed per dataset, whatever the run's seed
        # cross-validation (the tuning experiment): fold cv_fold of cv_folds is the validation rows, and the test
        # rows are dropped as soon as the split is known: no tensor, loader or scaler ever holds one
        self.cv_folds, self.cv_fold = check_folds(cv_folds, cv_fold)
        if self.cv_folds and self.val_fraction > 0:
            raise DataError("dataset.cv_folds and dataset.val_fraction both choose validation rows: set one to 0")
        self.eval_split = "test"  # "val": the evaluation reads the validation rows, never the test rows
        self._ready = False
        self.read_sha256: dict[str, str] = {}  # set by setup: RawData.sha256
        Scaler(scaling)  # fail early on an unknown scaling name

    # ---------------------------------------------------------------- subclass hooks
    checks_duplicates = False  # warn about samples repeated in the file, and test rows equal to training rows

    def load(self) -> RawData:
        raise NotImplementedError

    def data_files(self) -> list[Path]:
        """The files :meth:`load` reads, in a fixed order (known before reading; some may not exist yet).
        A run records their sha256, so a file changed since is noticed (mnp/runs/rundir.py)."""
        return []

    # ---------------------------------------------------------------- setup
    def setup(self, stage: str | None = None) -> None:
        if self._ready:
            return
        raw = self.load()
        self.read_sha256 = dict(
            raw.sha256
        )  # the run records these: the data it parsed, not the files as they are later
        views = [np.asarray(v) for v in raw.views]
        for v, x in enumerate(views):
            check_numeric(x, raw.source, str(v + 1))
        views = [x.astype(np.float64) for x in views]
        y = np.asarray(raw.y).ravel()
        validate_arrays(views, y, raw.source)
        warn_constant_views(views, raw.source)
        y = y.astype(np.int64)
        from_files = self.use_split_files and (raw.train_idx is not None or raw.test_idx is not None)
        if from_files:  # an explicitly empty test split fits only (in-memory data; files refuse one when read)
            train_idx, test_idx = split_indices(raw.train_idx, raw.test_idx, len(y), raw.source, empty_test=True)
        else:
            train_idx, test_idx = stratified_split(y, self.test_fraction, self.seed)
        classes, y_class = np.unique(y, return_inverse=True)
        absent = describe_absent(classes)
        if absent:
            log.warning(
                "%s: labels %s never occur (labels span 0..%d); the %d classes present are renumbered "
                "0..%d in sorted order",
                raw.source,
                absent,
                classes[-1],
                len(classes),
                len(classes) - 1,
            )
        unknown = sorted(set(self.ood_classes) - set(classes.tolist()))
        if unknown:
            raise DataError(
                f"{raw.source}: ood_classes {unknown} are not labels of this dataset ({classes.min()}..{classes.max()})"
            )
        is_ood, keep = np.isin(y, self.ood_classes), ~np.isin(classes, self.ood_classes)
        ood_idx = np.flatnonzero(is_ood)
        rank = np.full(len(classes), -1)
        rank[keep] = np.arange(keep.sum())
        label = rank[y_class]  # 0..K-1 in the sorted order of the kept classes (-1: held-out OOD rows)
        train_idx, test_idx = train_idx[~is_ood[train_idx]], test_idx[~is_ood[test_idx]]
        missing = np.setdiff1d(classes[keep], y[train_idx])
        if len(missing):
            raise DataError(
                f"{raw.source}: class(es) {missing.tolist()} have no training samples; "
                "check the labels or the split files"
            )
        val_idx = np.empty(0, dtype=np.int64)
        if self.cv_folds:
            tr_local, va_local = kfold_split(y[train_idx], self.cv_folds, self.cv_fold, self.val_seed, raw.source)
            train_idx, val_idx = train_idx[tr_local], train_idx[va_local]
            test_idx, ood_idx = test_idx[:0], ood_idx[:0]  # never read from here on
            raw.external_ood = {}
        elif self.val_fraction > 0:
            # selection protocol (docs/method.md §5.4): a stratified share of the training rows, drawn from
            # val_seed alone, so every seed and every candidate is scored on the same validation rows
            tr_local, va_local = stratified_split(y[train_idx], self.val_fraction, self.val_seed)
            train_idx, val_idx = train_idx[tr_local], train_idx[va_local]
        self.num_classes = int(keep.sum())
        if self.num_classes < 2:
            raise DataError(f"{raw.source}: need at least 2 classes, found {self.num_classes}")
        if len(test_idx) == 0 and not self.cv_folds and not (from_files and len(raw.test_idx) == 0):  # fit only
            hint = empty_test_hint(from_files, int(np.bincount(y_class[~is_ood]).max()), self.test_fraction)
            raise DataError(f"{raw.source}: the test split is empty: {hint}")
        if self.checks_duplicates:  # across the split drawn above, the one the run uses
            warn_duplicates(views, raw.source, np.concatenate([train_idx, val_idx]), test_idx)
        self.view_dims = [v.shape[1] for v in views]
        scalers = [Scaler(self.scaling).fit(v[train_idx]) for v in views]

        def scaled(idx: np.ndarray, fit_own: bool = False) -> list[Tensor]:
            out = []
            for v, (x, sc) in enumerate(zip(views, scalers)):
                sc = Scaler(self.scaling).fit(x[idx]) if fit_own and len(idx) else sc
                out.append(self._tensor(x[idx], sc, raw.source, v))
            return out

        self.train_views, self.train_y = scaled(train_idx), torch.as_tensor(label[train_idx])
        self.val_views, self.val_y = scaled(val_idx), torch.as_tensor(label[val_idx])
        self.test_views = scaled(test_idx, fit_own=self.scale_test_separately)
        self.test_y = torch.as_tensor(label[test_idx])
        self.train_idx, self.val_idx, self.test_idx = train_idx, val_idx, test_idx
        self.scalers, self.class_labels = scalers, classes[keep] + raw.label_offset  # the file's label of class k
        log.info("%s", self._loaded(raw, from_files, len(ood_idx)))
        self.ood_sets: dict[str, tuple[list[Tensor], Tensor]] = {}
        if len(ood_idx):
            ood = scaled(ood_idx)
            self.ood_sets["heldout"] = (
                [torch.cat([a, b]) for a, b in zip(self.test_views, ood)],
                torch.cat([torch.zeros(len(test_idx)), torch.ones(len(ood_idx))]).long(),
            )
        for name, ood_views in raw.external_ood.items():
            ov = [
                self._tensor(np.asarray(x, dtype=np.float64), sc, f"{raw.source} (OOD set {name})", v)
                for v, (x, sc) in enumerate(zip(ood_views, scalers))
            ]
            self.ood_sets[name] = self.build_external_ood(name, ov)
        self._ready = True

    def _loaded(self, raw: RawData, from_files: bool, n_ood: int) -> str:
        """The run's one line on its data: source, rows per split, views, classes and where the split came from."""
        rows = f"{len(self.train_idx)} train / {len(self.test_idx)} test rows"
        rows += f" / {len(self.val_idx)} validation" if len(self.val_idx) else ""
        rows += f" (fold {self.cv_fold} of {self.cv_folds}; the test rows are left unread)" if self.cv_folds else ""
        rows += f" (+ {n_ood} of the held-out classes, OOD)" if n_ood else ""
        split = (
            raw.split
            if from_files
            else f"drawn per class from seed {self.seed} (dataset.test_fraction={self.test_fraction:g})"
        )
        base = " (1-based in the file, renumbered from 0)" if raw.label_offset else ""
        return (
            f"loaded {raw.source}: {rows}, {len(self.view_dims)} views of dims {self.view_dims}, "
            f"{self.num_classes} classes{base}; split: {split}"
        )

    def _tensor(self, x: np.ndarray, sc: Scaler, source: str, v: int) -> Tensor:
        """One view's rows scaled to float32; a DataError names the view if scaling overflowed."""
        t = torch.as_tensor(sc.transform(x), dtype=torch.float32)
        if not (sc.finite() and torch.isfinite(t).all()):
            raise DataError(
                f"{source}: view {v + 1} overflowed in scaling (dataset.scaling={self.scaling}): its "
                f"values, up to {np.abs(x).max(initial=0):.3g} in magnitude, are too large for the scaler "
                "or for float32; divide the view by a constant before saving it"
            )
        return t

    def preprocessing(self) -> dict:
        """What predicting on raw rows needs (:mod:`mnp.cli.predictor`), as tensors and plain values that a
        checkpoint stores: each view's scaler fitted on the training rows and the file's label of each class."""
        return {
            "scaling": self.scaling,
            "scale_test_separately": bool(self.scale_test_separately),
            "shift": [torch.as_tensor(s.shift) for s in self.scalers],
            "scale": [torch.as_tensor(s.scale) for s in self.scalers],
            "labels": torch.as_tensor(self.class_labels),
            "eval_batch_size": self.eval_batch_size,
        }

    def build_external_ood(self, name: str, ood_views: list[Tensor]) -> tuple[list[Tensor], Tensor]:
        """ID test samples followed by OOD samples; subclasses may subsample (CIFAR10-C)."""
        views = [torch.cat([a, b]) for a, b in zip(self.test_views, ood_views)]
        is_ood = torch.cat([torch.zeros(len(self.test_y)), torch.ones(ood_views[0].shape[0])]).long()
        return views, is_ood

    # ---------------------------------------------------------------- loaders
    @property
    def ood_names(self) -> list[str]:
        return list(self.ood_sets)

    def _dist(self) -> tuple[int, int]:
        t = self.trainer
        return (t.global_rank, t.world_size) if t is not None else (0, 1)

    def train_dataloader(self) -> DataLoader:
        rank, world = self._dist()
        return index_loader(
            self.train_views,
            self.train_y,
            self.batch_size,
            self.shuffle,
            seed=self.seed,
            rank=rank,
            world_size=world,
            stream=self.full_batches,
        )

    def val_dataloader(self):
        if len(self.val_y) == 0:
            return []
        return index_loader(self.val_views, self.val_y, self.eval_batch_size, False)

    def test_dataloader(self) -> list[DataLoader]:
        if self.eval_split == "val":  # the selection protocol: the validation rows only, no test or OOD rows
            if len(self.val_y) == 0:
                raise DataError("eval.split=val needs validation rows: set dataset.val_fraction > 0")
            return [index_loader(self.val_views, self.val_y, self.eval_batch_size, False)]
        loaders = [index_loader(self.test_views, self.test_y, self.eval_batch_size, False)]
        loaders += [index_loader(v, o, self.eval_batch_size, False) for v, o in self.ood_sets.values()]
        return loaders

    def describe(self) -> dict:
        return {
            "name": self.name,
            "num_classes": self.num_classes,
            "view_dims": self.view_dims,
            "n_train": len(self.train_y),
            "n_val": len(self.val_y),
            "n_test": len(self.test_y),
            "ood": {k: int(v[1].sum()) for k, v in self.ood_sets.items()},
        }


class TensorDataModule(MultiViewDataModule):
    """Wrap in-memory arrays (plain-Python use): pass views and labels, optionally split indices."""

    name = "tensors"

    def __init__(self, views: Sequence, y, train_idx=None, test_idx=None, **kwargs):
        kwargs.setdefault("scaling", "none")
        super().__init__(**kwargs)
        self._raw = RawData([np.asarray(v) for v in views], np.asarray(y), train_idx, test_idx)

    def load(self) -> RawData:
        return self._raw
