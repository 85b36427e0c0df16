"""CIFAR10-C (docs/method.md §4): three corruptions of one image as three views, with SVHN / CIFAR-100 OOD sets.

Reads the Inception-v3 feature cache that ``python -m mnp.tools.build_features`` writes (layout in datamodules/feature_cache.py,
the official code's). Views are standardised with training statistics (docs/method.md §2: standard scaling).
Each OOD set holds ``ood_n_id`` ID test samples plus ``ood_n_ood`` OOD samples, both drawn *without*
replacement (the official code draws with replacement), and every OOD feature is copied into all
views; metrics.json then carries ``ood/<name>/auroc`` with OOD as the positive class.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from datamodules.base import MultiViewDataModule, RawData, Scaler
from datamodules.errors import DataError, MissingData
from datamodules.feature_cache import feature_path, inception_description, labels_path, ood_feature_path

log = logging.getLogger(__name__)

PAPER_CORRUPTIONS = ("gaussian_noise", "shot_noise", "impulse_noise")  # the official code's three
PAPER_SEVERITIES = (1, 3, 5)


class CIFAR10C(MultiViewDataModule):
    """Cached features of ``corruptions[i]`` at ``severities[i]`` as view i; external OOD sets from ``ood``.

    ``ood`` maps an OOD set's name (used in metrics keys) to its folder, relative to ``feature_dir``
    or absolute. ``extractor`` (weights, input_size, seed), when given, must match the settings
    recorded in the cache's cache.json, so random-init features are never mistaken for ImageNet ones.
    ``scale_test_separately`` (the official code) also standardises each OOD set with its own statistics.
    """

    name = "cifar10c"

    def __init__(
        self,
        feature_dir: str,
        corruptions: Sequence[str] = PAPER_CORRUPTIONS,
        severities: Sequence[int] = PAPER_SEVERITIES,
        ood: dict[str, str] | None = None,
        ood_n_id: int | None = 5000,
        ood_n_ood: int | None = 5000,
        extractor: dict | None = None,
        **kwargs,
    ):
        kwargs.setdefault("scaling", "standard")
        super().__init__(**kwargs)
        if len(corruptions) != len(severities):
            raise DataError(f"{len(corruptions)} corruptions but {len(severities)} severities; give one severity each")
        self.feature_dir = Path(feature_dir)
        self.corruptions, self.severities = list(corruptions), [int(s) for s in severities]
        self.ood = dict(ood if ood is not None else {"svhn": "svhn", "cifar100": "cifar100"})
        self.ood_n_id, self.ood_n_ood = ood_n_id, ood_n_ood
        self.extractor = dict(extractor) if extractor is not None else None

    # ---------------------------------------------------------------- reading
    def build_hint(self) -> str:
        return (
            f"build them with `python -m mnp.tools.build_features dataset.feature_dir={self.feature_dir} "
            f"'dataset.corruptions=[{','.join(self.corruptions)}]' "
            f"'dataset.severities=[{','.join(map(str, self.severities))}]'`"
        )

    def _read(self, path: Path) -> np.ndarray:
        if not path.exists():
            raise MissingData(f"{self.name} features not found: {path}; {self.build_hint()}")
        x = np.load(path)
        if x.ndim != 2:
            raise DataError(f"{path}: shape {x.shape}; expected samples × features")
        return x

    def _labels(self, split: str, n: int) -> np.ndarray:
        """0-based labels of ``n`` rows; accepts the official files that repeat them once per severity."""
        path = labels_path(self.feature_dir, split)
        y = self._read_labels(path)
        if len(y) != n:
            blocks = len(y) // n if n else 0
            if blocks < 2 or len(y) != blocks * n or not (y.reshape(blocks, n) == y[:n]).all():
                raise DataError(f"{path}: {len(y)} labels for {n} feature rows")
            y = y[:n]
        return y

    def _read_labels(self, path: Path) -> np.ndarray:
        if not path.exists():
            raise MissingData(f"{self.name} labels not found: {path}; {self.build_hint()}")
        return np.load(path).ravel()

    def check_settings(self) -> None:
        """The cache's recorded extractor must be the configured one."""
        meta = self.feature_dir / "cache.json"
        if self.extractor is None:
            return
        if not meta.exists():
            log.warning("%s has no cache.json; cannot check which extractor made these features", self.feature_dir)
            return
        want = inception_description(
            self.extractor.get("weights"), self.extractor.get("input_size", 299), self.extractor.get("seed", 0)
        )
        have = json.loads(meta.read_text())["settings"]["extractor"]
        if have != want:
            raise DataError(
                f"{meta}: features were extracted with {have}, but dataset.extractor asks for {want}; "
                "rebuild into another feature_dir or fix dataset.extractor"
            )

    def data_files(self) -> list[Path]:
        pairs = list(zip(self.corruptions, self.severities))
        return [
            *(feature_path(self.feature_dir, split, c, s) for split in ("train", "test") for c, s in pairs),
            *(labels_path(self.feature_dir, split) for split in ("train", "test")),
            *(ood_feature_path(self.feature_dir, folder) for folder in self.ood.values()),
        ]

    def load(self) -> RawData:
        self.check_settings()
        pairs = list(zip(self.corruptions, self.severities))
        train = [self._read(feature_path(self.feature_dir, "train", c, s)) for c, s in pairs]
        test = [self._read(feature_path(self.feature_dir, "test", c, s)) for c, s in pairs]
        for split, views in (("train", train), ("test", test)):
            if len({v.shape[0] for v in views}) != 1:
                raise DataError(
                    f"{self.feature_dir}/{split}: views have {[v.shape[0] for v in views]} rows; "
                    "every corruption must cover the same images"
                )
        n_train, n_test = train[0].shape[0], test[0].shape[0]
        y = np.concatenate([self._labels("train", n_train), self._labels("test", n_test)])
        views = [np.concatenate([a, b]) for a, b in zip(train, test)]
        ood = {}
        for name, folder in self.ood.items():
            x = self._read(ood_feature_path(self.feature_dir, folder))
            if x.shape[1] != views[0].shape[1]:
                raise DataError(
                    f"{ood_feature_path(self.feature_dir, folder)}: {x.shape[1]} features, "
                    f"the views have {views[0].shape[1]}"
                )
            ood[name] = [x] * len(views)  # the OOD image's features copied into every view
        idx = np.arange(n_train + n_test)
        return RawData(
            views,
            y,
            idx[:n_train],
            idx[n_train:],
            source=str(self.feature_dir),
            external_ood=ood,
            split="the cache's train / test features",
        )

    # ---------------------------------------------------------------- OOD sets
    def build_external_ood(self, name: str, ood_views: list[Tensor]) -> tuple[list[Tensor], Tensor]:
        """``ood_n_id`` ID test + ``ood_n_ood`` OOD samples, without replacement.

        The generator depends on the seed only, so every OOD set shares the same ID half.
        """
        if self.scale_test_separately:  # own statistics; refitting after the train scaling equals fitting raw features
            ood_views = [
                torch.as_tensor(
                    Scaler(self.scaling).fit(v.double().numpy()).transform(v.double().numpy()), dtype=torch.float32
                )
                for v in ood_views
            ]
        g = torch.Generator().manual_seed(self.seed)
        return ood_mix(self.test_views, ood_views, self.ood_n_id, self.ood_n_ood, g)


def ood_mix(
    id_views: Sequence[Tensor],
    ood_views: Sequence[Tensor],
    n_id: int | None,
    n_ood: int | None,
    generator: torch.Generator,
) -> tuple[list[Tensor], Tensor]:
    """Concatenate ID and OOD samples, each subsampled *without* replacement to the given size.

    Returns views and ``is_ood`` (1 for OOD, the positive class of the AUROC).
    """

    def take(views: Sequence[Tensor], n: int | None) -> list[Tensor]:
        total = views[0].shape[0]
        if n is None or n >= total:
            return list(views)
        idx = torch.randperm(total, generator=generator)[:n]
        return [v[idx] for v in views]

    a, b = take(id_views, n_id), take(ood_views, n_ood)
    views = [torch.cat([x, y]) for x, y in zip(a, b)]
    is_ood = torch.cat([torch.zeros(a[0].shape[0], dtype=torch.long), torch.ones(b[0].shape[0], dtype=torch.long)])
    return views, is_ood
