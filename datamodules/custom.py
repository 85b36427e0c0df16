"""Your own multi-view data: ``dataset=custom dataset.path=<file>``.

Accepted files: ``.npz`` with ``x1..xM`` (N×d), ``y`` (N,) and optional ``train_idx`` / ``test_idx``
(0-based), or a ``.mat`` (v5 or v7.3/HDF5) in one of the layouts of :mod:`datamodules.formats`.
Without split indices (or with ``split="stratified"``) an 80/20 per-class split is drawn from the seed.
1-based labels are renumbered 0..K−1 with a warning (the paper's files are 1-based and load without one).
"""

from __future__ import annotations

import logging
from pathlib import Path

from datamodules.base import MultiViewDataModule, RawData
from datamodules.features import check_split
from datamodules.formats import read_file

log = logging.getLogger(__name__)


class CustomDataModule(MultiViewDataModule):
    name = "custom"
    checks_duplicates = True

    def __init__(self, path: str, split: str = "files", **kwargs):
        check_split(split)
        super().__init__(use_split_files=split == "files", **kwargs)
        self.path, self.split = Path(path).expanduser(), split

    def data_files(self) -> list[Path]:
        return [self.path]

    def load(self) -> RawData:
        raw = read_file(self.path)
        if raw.label_offset:  # your file's labels are not the ones predictions.npz holds: said once, as for gaps
            k = int(raw.y.max()) + 1
            log.warning(
                "%s: labels are 1-based (1..%d); they are renumbered 0..%d, the labels of predictions.npz",
                raw.source,
                k,
                k - 1,
            )
        return raw
