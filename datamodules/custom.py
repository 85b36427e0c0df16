"""Your own multi-view data: ``dataset=custom dataset.path=<file>``.

Accepted files: ``.npz`` with ``x1..xM`` (N×d), ``y`` (N,) and optional ``train_idx`` / ``test_idx``
(0-based), or a ``.mat`` (v5 or v7.3/HDF5) in one of the layouts of :mod:`datamodules.formats`.
Without split indices (or with ``split="stratified"``) an 80/20 per-class split is drawn from the seed.
"""
from __future__ import annotations

from pathlib import Path

from datamodules.base import MultiViewDataModule, RawData
from datamodules.features import check_split, warn_duplicates
from datamodules.formats import read_file


class CustomDataModule(MultiViewDataModule):
    name = "custom"

    def __init__(self, path: str, split: str = "files", **kwargs):
        check_split(split)
        super().__init__(use_split_files=split == "files", **kwargs)
        self.path, self.split = Path(path).expanduser(), split

    def data_files(self) -> list[Path]:
        return [self.path]

    def load(self) -> RawData:
        raw = read_file(self.path)
        warn_duplicates(raw)
        return raw
