"""digits_c: an offline, real-image run of the whole CIFAR10-C pipeline (docs/method.md §4).

scikit-learn's 1797 real 8×8 digits, upscaled to 32×32, are corrupted into three views with the same
corruption config as cifar10c; the OOD set ``photos`` holds patches of scikit-learn's two sample
photographs (china.jpg, flower.jpg), a disjoint real image source, with each patch's features copied
into all views. Features come from the same extractor code (datamodules.feature_cache) and land in the same cache
layout, built on the first ``setup()`` (resumable) and reused after. No ImageNet weights exist offline,
so the default extractor is a random-init Inception-v3 at its smallest input size (75 px).
Held-out digit classes are a second OOD option: ``dataset.ood_classes=[9]`` adds ``ood/heldout/auroc``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from datamodules import images as im
from datamodules.base import RawData, stratified_split
from datamodules.cifar10c import CIFAR10C, PAPER_CORRUPTIONS, PAPER_SEVERITIES
from datamodules.errors import DataError
from datamodules.feature_cache import (
    Job,
    feature_path,
    inception_extractor,
    ood_feature_path,
    run_jobs,
    update_cache_meta,
    write_labels,
)

OOD_NAME = "photos"


def digits_c_jobs(
    feature_dir: str | Path,
    corruptions: Sequence[str],
    severities: Sequence[int],
    corruption_params: str = "imagenet_c",
    image_size: int = 32,
    test_fraction: float = 0.2,
    split_seed: int = 0,
    photo_window: int = 64,
    photo_stride: int = 32,
    seed: int = 0,
) -> list[Job]:
    """Jobs of the digits_c cache (a stratified train/test split drawn from ``split_seed``); writes labels."""
    root = Path(feature_dir)
    if len(corruptions) != len(severities):
        raise DataError(f"{len(corruptions)} corruptions but {len(severities)} severities; give one severity each")
    digits = im.digits_images(image_size)
    split = dict(zip(("train", "test"), stratified_split(digits.labels, test_fraction, split_seed)))
    for name, idx in split.items():
        write_labels(root, name, digits.labels[idx])
    jobs = []
    for c, s in zip(corruptions, severities):
        im.check_corruption(c, s, corruption_params)
        for name, idx in split.items():

            def corrupt(x, start, name=name, c=c, s=s):
                return im.corrupt_images(x, c, s, im.stable_seed(seed, name, c, s, start), corruption_params)

            jobs.append(
                Job(
                    feature_path(root, name, c, s),
                    lambda idx=idx: digits.images[idx],
                    corrupt,
                    f"digits {name}, {c} severity {s} ({corruption_params}, seed {seed})",
                )
            )
    photos = functools.partial(im.photo_patches, image_size, photo_window, photo_stride)
    jobs.append(
        Job(
            ood_feature_path(root, OOD_NAME),
            lambda: photos().images,
            None,
            f"{photo_window}px patches of china.jpg and flower.jpg every {photo_stride}px, clean",
        )
    )
    return jobs


class DigitsC(CIFAR10C):
    """The cifar10c datamodule on digit features it builds itself; OOD set ``photos``.

    ``ood_n_id`` / ``ood_n_ood`` default to all samples (about 360 ID test digits and 456 patches).
    Build options: ``image_size``, ``test_fraction`` and ``split_seed`` (fixed across training seeds
    so they share one cache), ``photo_window``/``photo_stride``, ``corruption_seed``, ``chunk_size``
    (images per resumable chunk), ``feature_batch_size`` and ``device`` of the extractor.
    ``build_missing=False`` only reads the cache (a run rebuilt from a checkpoint writes no files).
    """

    name = "digits_c"

    def __init__(
        self,
        feature_dir: str,
        corruptions: Sequence[str] = PAPER_CORRUPTIONS,
        severities: Sequence[int] = PAPER_SEVERITIES,
        corruption_params: str = "imagenet_c",
        ood_n_id: int | None = None,
        ood_n_ood: int | None = None,
        extractor: dict | None = None,
        image_size: int = 32,
        test_fraction: float = 0.2,
        split_seed: int = 0,
        photo_window: int = 64,
        photo_stride: int = 32,
        corruption_seed: int = 0,
        chunk_size: int = 512,
        feature_batch_size: int = 128,
        device: str = "auto",
        build_missing: bool = True,
        **kwargs,
    ):
        extractor = dict(extractor) if extractor is not None else {"weights": None, "input_size": 75, "seed": 0}
        super().__init__(
            feature_dir,
            corruptions,
            severities,
            ood={OOD_NAME: OOD_NAME},
            ood_n_id=ood_n_id,
            ood_n_ood=ood_n_ood,
            extractor=extractor,
            **kwargs,
        )
        self.corruption_params, self.corruption_seed = corruption_params, int(corruption_seed)
        self.images = {
            "image_size": int(image_size),
            "test_fraction": float(test_fraction),
            "split_seed": int(split_seed),
            "photo_window": int(photo_window),
            "photo_stride": int(photo_stride),
        }
        self.chunk_size, self.feature_batch_size, self.device = int(chunk_size), int(feature_batch_size), device
        self.build_missing = bool(build_missing)

    def build_hint(self) -> str:
        if not self.build_missing:
            return "train.py builds it (evaluate.py only reads it)"
        return f"it is rebuilt on the next run; delete {self.feature_dir} if it is damaged"

    def build(self) -> int:
        """Compute whatever the cache lacks; returns the number of arrays computed."""
        ex = self.extractor
        extractor = inception_extractor(
            ex.get("weights"), ex.get("input_size", 75), ex.get("seed", 0), self.feature_batch_size, self.device
        )
        settings = {
            "extractor": extractor.description,
            "corruption_params": self.corruption_params,
            "corruption_seed": self.corruption_seed,
            "images": self.images,
        }
        update_cache_meta(self.feature_dir, settings, {})  # refuse a cache of other settings before writing
        jobs = digits_c_jobs(
            self.feature_dir,
            self.corruptions,
            self.severities,
            self.corruption_params,
            seed=self.corruption_seed,
            **self.images,
        )
        return run_jobs(self.feature_dir, jobs, extractor, self.chunk_size, settings)

    def load(self) -> RawData:
        if self.build_missing:
            self.build()
        return super().load()
