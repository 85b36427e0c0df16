"""Inception-v3 features of (corrupted) images, cached as .npy in the official MNP layout (docs/method.md §4).

Layout under a feature directory::

    {train,test}/feature/{corruption}_severity_{s}_inceptionv3_feat.npy   (N, 2048) float32, one per view
    {train,test}/labels.npy                                              (N,) int64, 0-based
    <ood>/feature/test_inceptionv3_feat.npy                              clean OOD test images
    cache.json                                                           settings + provenance of each array

Build the CIFAR10-C set (config: conf/features/cifar10c.yaml, which includes conf/dataset/cifar10c.yaml,
so the same ``dataset.*`` overrides serve this command and ``train.py``)::

    python -m mnp.tools.build_features [paths.data_dir=DIR] [dataset.feature_dir=OUT] [device=cuda] [batch_size=256]

The command resumes where it stopped: every array is computed in chunks written atomically to
``<array>.partial/rows_<start>_<stop>.npy``; a rerun skips finished arrays and finished chunks.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from datamodules.errors import DataError, MissingData, torchvision
from datamodules.files import atomic_write

log = logging.getLogger(__name__)

FEATURE_NAME = "inceptionv3"
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
INCEPTION_MIN_SIZE = 75


# ---------------------------------------------------------------------------- layout
def feature_path(root: str | Path, split: str, corruption: str, severity: int) -> Path:
    return Path(root) / split / "feature" / f"{corruption}_severity_{int(severity)}_{FEATURE_NAME}_feat.npy"


def labels_path(root: str | Path, split: str) -> Path:
    return Path(root) / split / "labels.npy"


def ood_feature_path(root: str | Path, subdir: str) -> Path:
    return Path(root) / subdir / "feature" / f"test_{FEATURE_NAME}_feat.npy"


def save_npy(path: Path, array: np.ndarray) -> None:
    """np.save through a temporary file and an atomic rename: never half-written."""

    def write(tmp):
        with open(tmp, "wb") as f:
            np.save(f, array)

    atomic_write(path, write)


# ---------------------------------------------------------------------------- extractor
def resolve_device(device: str | torch.device = "auto") -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def inception_description(weights: str | None, input_size: int = 299, seed: int = 0) -> dict:
    """What identifies a set of features: network, weights (seed for a random init) and input size."""
    desc = {"model": "inception_v3", "weights": weights, "input_size": int(input_size)}
    if weights is None:
        desc["seed"] = int(seed)
    return desc


class FeatureExtractor:
    """uint8 images (N, H, W, 3) -> float32 features (N, D).

    Each batch is scaled to [0, 1], resized to ``input_size``² (bilinear), ImageNet-normalised and
    passed through the network, on the GPU when there is one. ``model_fn`` builds the network on the
    first call, so a fully cached run never needs the weights.
    """

    def __init__(
        self,
        model_fn: Callable[[], nn.Module],
        input_size: int,
        batch_size: int = 256,
        device: str | torch.device = "auto",
        description: dict | None = None,
    ):
        self.model_fn, self.input_size, self.batch_size = model_fn, int(input_size), int(batch_size)
        self.device = resolve_device(device)
        self.description = dict(description or {})
        self._model: nn.Module | None = None

    @property
    def model(self) -> nn.Module:
        if self._model is None:
            self._model = self.model_fn().eval().to(self.device, memory_format=torch.channels_last)
        return self._model

    @torch.inference_mode()
    def __call__(self, images: np.ndarray, on_batch: Callable[[int], object] | None = None) -> np.ndarray:
        if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
            raise ValueError(f"expected uint8 images (N, H, W, 3), got {images.dtype} {images.shape}")
        mean = torch.tensor(IMAGENET_MEAN, device=self.device).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, device=self.device).view(1, 3, 1, 1)
        out = []
        for i in range(0, len(images), self.batch_size):
            x = torch.as_tensor(np.array(images[i : i + self.batch_size]), device=self.device)
            x = x.permute(0, 3, 1, 2).float().div_(255.0)
            if x.shape[-2:] != (self.input_size, self.input_size):
                x = nn.functional.interpolate(
                    x, size=(self.input_size, self.input_size), mode="bilinear", align_corners=False
                )
            x = ((x - mean) / std).contiguous(memory_format=torch.channels_last)
            out.append(self.model(x).flatten(1).float().cpu().numpy())
            if on_batch is not None:
                on_batch(x.shape[0])
        return np.concatenate(out) if out else np.empty((0, 0), np.float32)


def weights_error(weights, err: Exception) -> MissingData:
    url = torchvision("models", "the Inception-v3 features").Inception_V3_Weights[weights].url
    target = Path(torch.hub.get_dir()) / "checkpoints" / Path(url).name
    return MissingData(
        f"Inception-v3 {weights} weights are not in the torch cache ({target}) and cannot be downloaded "
        f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); download {url} where there is "
        f"network and copy it to {target} (or set TORCH_HOME, or pass dataset.extractor.weights=<path to the "
        ".pth>); weights=null (random init) is only for tests and the offline digits_c demo"
    )


def inception_v3(weights: str | None = "IMAGENET1K_V1", seed: int = 0) -> nn.Module:
    """torchvision's Inception-v3 with ``fc`` replaced by Identity: 2048-d pooled features.

    ``weights``: a torchvision weights name (IMAGENET1K_V1), a path to its .pth file, or None for a
    random init drawn from ``seed`` (tests and the offline demo only).
    """
    models = torchvision("models", "the Inception-v3 features")
    Inception_V3_Weights, tv_inception_v3 = models.Inception_V3_Weights, models.inception_v3

    if weights is None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            model = tv_inception_v3(weights=None, aux_logits=False, init_weights=True)
    elif Path(str(weights)).suffix in {".pth", ".pt"}:
        if not Path(weights).exists():
            raise MissingData(f"Inception-v3 weights file {weights} does not exist")
        model = tv_inception_v3(weights=None, aux_logits=False, init_weights=False, transform_input=True)
        state = torch.load(weights, map_location="cpu", weights_only=True)
        model.load_state_dict({k: v for k, v in state.items() if not k.startswith("AuxLogits.")})
    else:
        if weights not in Inception_V3_Weights.__members__:
            raise ValueError(f"unknown Inception-v3 weights '{weights}'; use IMAGENET1K_V1, a .pth path or null")
        try:
            model = tv_inception_v3(weights=Inception_V3_Weights[weights], aux_logits=False)
        except (OSError, RuntimeError) as e:  # URLError is an OSError; a bad file fails its hash check
            raise weights_error(weights, e) from None
    model.fc = nn.Identity()
    return model.eval()


def inception_extractor(
    weights: str | None = "IMAGENET1K_V1",
    input_size: int = 299,
    seed: int = 0,
    batch_size: int = 256,
    device: str = "auto",
) -> FeatureExtractor:
    if int(input_size) < INCEPTION_MIN_SIZE:
        raise ValueError(f"Inception-v3 needs inputs of at least {INCEPTION_MIN_SIZE} px, got input_size={input_size}")
    return FeatureExtractor(
        functools.partial(inception_v3, weights, seed),
        input_size,
        batch_size,
        device,
        inception_description(weights, input_size, seed),
    )


# ---------------------------------------------------------------------------- resumable cache
@dataclass
class Job:
    """One feature array: its path, a loader of the source images and an optional per-chunk transform
    ``transform(images, start_row)`` (a corruption seeded by the chunk, so reruns are identical)."""

    path: Path
    images: Callable[[], np.ndarray]
    transform: Callable[[np.ndarray, int], np.ndarray] | None = None
    provenance: str = ""


def extract_cached(job: Job, extractor: FeatureExtractor, chunk_size: int, root: Path | None = None) -> bool:
    """Compute ``job.path`` chunk by chunk, skipping finished chunks; False when it already existed."""
    if job.path.exists():
        return False
    images = job.images()
    n, chunk_size = len(images), max(1, int(chunk_size))
    if n == 0:
        raise DataError(f"{job.provenance or job.path}: no images to extract features from")
    part = job.path.with_name(job.path.name + ".partial")
    bounds = [(a, min(a + chunk_size, n)) for a in range(0, n, chunk_size)]
    chunk = {b: part / f"rows_{b[0]:07d}_{b[1]:07d}.npy" for b in bounds}
    done = sum(b - a for (a, b), f in chunk.items() if f.exists())
    name = str(job.path.relative_to(root)) if root else job.path.name
    with tqdm(total=n, initial=done, desc=name, unit="img", dynamic_ncols=True) as bar:
        for (a, b), f in chunk.items():
            if f.exists():
                continue
            x = images[a:b] if job.transform is None else job.transform(images[a:b], a)
            feats = extractor(x, on_batch=bar.update)
            if feats.shape[0] != b - a or not np.isfinite(feats).all():
                raise RuntimeError(
                    f"{name}: rows {a}:{b} gave features of shape {feats.shape} "
                    f"with {int((~np.isfinite(feats)).sum())} non-finite values"
                )
            save_npy(f, feats.astype(np.float32))
    save_npy(job.path, np.concatenate([np.load(f) for f in chunk.values()]))
    shutil.rmtree(part)
    return True


def update_cache_meta(root: Path, settings: dict, provenance: dict[str, str]) -> None:
    """Record settings and per-array provenance in ``cache.json``; refuse to mix other settings in."""
    path = Path(root) / "cache.json"
    meta = json.loads(path.read_text()) if path.exists() else {"settings": settings, "arrays": {}}
    if meta["settings"] != settings:
        raise DataError(
            f"{root} holds features built with {meta['settings']}, not {settings}; "
            "delete that directory or choose another feature_dir"
        )
    meta["arrays"].update(provenance)
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=2, sort_keys=True)))


def write_labels(root: Path, split: str, labels: np.ndarray) -> None:
    """Write ``{split}/labels.npy`` once; a rerun must find the same labels."""
    path = labels_path(root, split)
    labels = np.asarray(labels, dtype=np.int64)
    if path.exists():
        old = np.load(path)
        if not np.array_equal(old, labels):
            raise DataError(f"{path} holds other labels than the images being cached; delete {root} and rebuild")
        return
    save_npy(path, labels)


def run_jobs(root: str | Path, jobs: list[Job], extractor: FeatureExtractor, chunk_size: int, settings: dict) -> int:
    """Compute every missing array of ``jobs`` under ``root``; returns how many were computed."""
    root = Path(root)
    update_cache_meta(root, settings, {str(j.path.relative_to(root)): j.provenance for j in jobs})
    return sum(extract_cached(job, extractor, chunk_size, root) for job in jobs)


# ---------------------------------------------------------------------------- CIFAR10-C
def cifar10c_jobs(
    feature_dir: str | Path,
    image_dir: str | Path,
    corruptions,
    severities,
    ood: dict[str, str],
    corruption_params: str = "cifar10_c",
    published_test: bool = True,
    download: bool = False,
    seed: int = 0,
) -> list[Job]:
    """Jobs for the paper's OOD experiment; writes the label files on the way.

    Views: CIFAR-10 train and test images, each corrupted by (corruptions[i], severities[i]) with
    ``corruption_params`` (datamodules.images). With cifar10_c parameters and ``published_test``, a
    test view whose CIFAR-10-C ``.npy`` exists under ``image_dir`` is read from it instead of being
    generated. OOD: the clean test images of each ``ood`` set (svhn, cifar100), under ``feature_dir/<ood[name]>``.
    """
    from datamodules import images as im

    root = Path(feature_dir)
    if len(corruptions) != len(severities):
        raise DataError(f"{len(corruptions)} corruptions but {len(severities)} severities; give one severity each")
    sets = {
        split: functools.cache(functools.partial(im.load_images, "cifar10", image_dir, split, download))
        for split in ("train", "test")
    }
    for split in sets:
        if not labels_path(root, split).exists():
            write_labels(root, split, sets[split]().labels)
    jobs = []
    use_published = published_test and corruption_params == "cifar10_c"
    for c, s in zip(corruptions, severities):
        im.check_corruption(c, s, corruption_params)
        for split in ("train", "test"):
            path = feature_path(root, split, c, s)
            if split == "test" and use_published and im.has_cifar10c(image_dir, c):

                def published(c=c, s=s):
                    pub = im.read_cifar10c(image_dir, c, s)
                    if not np.array_equal(pub.labels, np.load(labels_path(root, "test"))):
                        raise DataError(f"{pub.source}: labels differ from the CIFAR-10 test labels; is it CIFAR-10-C?")
                    return pub.images

                jobs.append(Job(path, published, None, f"CIFAR-10-C/{c}.npy severity {s}"))
                continue

            def corrupt(x, start, split=split, c=c, s=s):
                return im.corrupt_images(x, c, s, im.stable_seed(seed, split, c, s, start), corruption_params)

            jobs.append(
                Job(
                    path,
                    lambda split=split: sets[split]().images,
                    corrupt,
                    f"CIFAR-10 {split}, {c} severity {s} ({corruption_params}, seed {seed})",
                )
            )
    for name, subdir in ood.items():
        if name not in im.READERS:
            raise DataError(f"unknown OOD set '{name}'; choose from {sorted(im.READERS)}")
        jobs.append(
            Job(
                ood_feature_path(root, subdir),
                functools.partial(lambda n: im.load_images(n, image_dir, "test", download).images, name),
                None,
                f"{name} test, clean",
            )
        )
    return jobs


def build_cifar10c(cfg) -> Path:
    """Build (or finish) the CIFAR10-C feature cache described by a composed features config."""
    ds = cfg.dataset
    ex = dict(ds.extractor)
    extractor = inception_extractor(ex["weights"], ex["input_size"], ex.get("seed", 0), cfg.batch_size, cfg.device)
    root = Path(ds.feature_dir)
    settings = {
        "extractor": extractor.description,
        "corruption_params": cfg.corruption_params,
        "corruption_seed": int(cfg.corruption_seed),
    }
    update_cache_meta(root, settings, {})  # refuse a cache of other settings before writing
    jobs = cifar10c_jobs(
        root,
        cfg.image_dir,
        list(ds.corruptions),
        list(ds.severities),
        dict(ds.ood),
        cfg.corruption_params,
        cfg.published_test,
        cfg.download,
        cfg.corruption_seed,
    )
    n = run_jobs(root, jobs, extractor, cfg.chunk_size, settings)
    log.info("%d feature arrays computed, %d already cached, under %s", n, len(jobs) - n, root)
    return root
