"""The six precomputed-feature datasets of docs/method.md §4 (handwritten, cub, pie, caltech101, scene15, hmdb).

``split="files"`` uses the file's own split (pre-split .mat) or the registered index files
(Trust4Conflict's 80/20 split; not proven to be MNP's); without either, and with
``split="stratified"``, an 80/20 per-class split is drawn from the seed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from datamodules.base import MultiViewDataModule, RawData
from datamodules.checks import split_indices
from datamodules.errors import DataError
from datamodules.formats import read_file, read_index
from datamodules.sources import DATASETS, DatasetSpec, fetch, local_path

log = logging.getLogger(__name__)

SPLITS = ("files", "stratified")


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise DataError(f"unknown split '{split}'; choose one of {', '.join(SPLITS)}")


def check_expected(raw: RawData, spec: DatasetSpec) -> None:
    """Compare N, view dims and K with the registry (docs/method.md §4)."""
    src = raw.source
    if len(raw.y) != spec.n:
        raise DataError(f"{src}: {spec.key} should have {spec.n} samples, the file has {len(raw.y)}; wrong file?")
    dims = tuple(int(v.shape[1]) for v in raw.views)
    if len(dims) != len(spec.view_dims):
        raise DataError(f"{src}: {spec.key} should have {len(spec.view_dims)} views, the file has {len(dims)}")
    if dims != spec.view_dims:
        if spec.dims_verified:
            raise DataError(
                f"{src}: {spec.key} should have view dims {list(spec.view_dims)}, the file has {list(dims)}"
            )
        log.warning("%s: view dims %s differ from the unverified expectation %s", src, list(dims), list(spec.view_dims))
    k = len(np.unique(raw.y))
    if k != spec.num_classes:
        raise DataError(f"{src}: {spec.key} should have {spec.num_classes} classes, the file has {k}")


class FeatureDataModule(MultiViewDataModule):
    """One registered dataset read from ``<data_dir>/<dataset>/<file>`` (downloaded when public).

    ``scaling`` defaults to the dataset's scaling in the official code (docs/method.md §2).
    """

    checks_duplicates = True

    def __init__(
        self,
        dataset: str,
        data_dir: str,
        file: str | None = None,
        split: str = "files",
        download: bool = True,
        checksum: bool = True,
        **kwargs,
    ):
        if dataset not in DATASETS:
            raise DataError(f"unknown dataset '{dataset}'; choose one of {', '.join(DATASETS)}")
        check_split(split)
        kwargs.setdefault("scaling", DATASETS[dataset].scaling)
        super().__init__(use_split_files=split == "files", **kwargs)
        self.name, self.dataset, self.data_dir, self.file = dataset, dataset, data_dir, file
        self.split, self.download, self.checksum = split, download, checksum

    def _fetch(self, f):
        return fetch(self.dataset, f, self.data_dir, allow_download=self.download, checksum=self.checksum)

    def data_files(self) -> list[Path]:
        f = DATASETS[self.dataset].file(self.file)
        splits = DATASETS[self.dataset].split_files.get(f.name, ()) if self.split == "files" else ()
        return [local_path(self.data_dir, self.dataset, d.name) for d in (f, *splits)]

    def load(self) -> RawData:
        spec = DATASETS[self.dataset]
        f = spec.file(self.file)
        raw = read_file(self._fetch(f))
        check_expected(raw, spec)
        if self.split == "files" and raw.train_idx is None and f.name in spec.split_files:
            p_tr, p_te = (self._fetch(i) for i in spec.split_files[f.name])
            tr, te = read_index(p_tr, raw.sha256), read_index(p_te, raw.sha256)
            raw.train_idx, raw.test_idx = split_indices(tr, te, len(raw.y), f"{p_tr} + {p_te.name}")
            raw.split = f"the index files {p_tr.name} / {p_te.name}"
        elif self.split == "files" and raw.train_idx is None:
            log.info("%s: no split files, drawing a stratified split from seed %d", raw.source, self.seed)
        return raw
