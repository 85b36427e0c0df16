"""Image sources for the CIFAR10-C experiment (docs/method.md §4) and its offline stand-in, plus corruptions.

Readers take torchvision's on-disk formats under a root directory:

* CIFAR-10: ``<root>/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}`` (pickles);
* CIFAR-100: ``<root>/cifar-100-python/{train, test, meta}`` (pickles, fine labels);
* SVHN: ``<root>/{train,test}_32x32.mat`` (``X`` is 32×32×3×N, ``y`` uses 10 for the digit 0);
* CIFAR-10-C (Hendrycks & Dietterich): ``<root>/CIFAR-10-C/<corruption>.npy`` (50000 = 5 severities ×
  10000 test images, in CIFAR-10 test order) and ``labels.npy``.

:func:`load_images` reads a set and, when its files are absent and ``download`` is set, fetches
them through torchvision first. Every image array is uint8 ``(N, H, W, 3)``.
"""

from __future__ import annotations

import pickle
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datamodules.errors import DataError, MissingData, torchvision

CIFAR10_DIR, CIFAR100_DIR, CIFAR10C_DIR = "cifar-10-batches-py", "cifar-100-python", "CIFAR-10-C"
CIFAR10_FILES = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
URLS = {
    "cifar10": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    "cifar100": "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    "svhn": "http://ufldl.stanford.edu/housenumbers/{split}_32x32.mat",
    "cifar10c": "https://zenodo.org/record/2535967 (CIFAR-10-C.tar)",
}


@dataclass
class ImageSet:
    """uint8 images (N, H, W, 3), 0-based integer labels (N,) and where they came from."""

    images: np.ndarray
    labels: np.ndarray
    source: str


# ---------------------------------------------------------------------------- readers
def _unpickle(path: Path) -> dict:
    if not path.exists():
        raise DataError(f"{path} does not exist")
    with open(path, "rb") as f:
        return pickle.load(f, encoding="latin1")


def _cifar_rows(data: np.ndarray, path: Path) -> np.ndarray:
    data = np.asarray(data, dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataError(f"{path}: 'data' has shape {data.shape}; expected (N, 3072) rows of 32×32×3 images")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def read_cifar10(root: str | Path, split: str) -> ImageSet:
    """CIFAR-10 ``train`` (5 batches, 50000) or ``test`` (10000) from the python pickle batches."""
    folder = Path(root) / CIFAR10_DIR
    images, labels = [], []
    for name in CIFAR10_FILES[split]:
        batch = _unpickle(folder / name)
        images.append(_cifar_rows(batch["data"], folder / name))
        labels.append(np.asarray(batch["labels"], dtype=np.int64))
    return ImageSet(np.concatenate(images), np.concatenate(labels), f"{folder}:{split}")


def read_cifar100(root: str | Path, split: str) -> ImageSet:
    """CIFAR-100 ``train`` or ``test`` with its 100 fine labels."""
    path = Path(root) / CIFAR100_DIR / split
    batch = _unpickle(path)
    return ImageSet(_cifar_rows(batch["data"], path), np.asarray(batch["fine_labels"], dtype=np.int64), str(path))


def read_svhn(root: str | Path, split: str) -> ImageSet:
    """SVHN cropped digits ``{split}_32x32.mat``; the label 10 stands for the digit 0."""
    from scipy.io import loadmat

    path = Path(root) / f"{split}_32x32.mat"
    if not path.exists():
        raise DataError(f"{path} does not exist")
    mat = loadmat(path)
    if "X" not in mat or "y" not in mat:
        raise DataError(f"{path}: expected keys 'X' and 'y', found {sorted(k for k in mat if not k.startswith('__'))}")
    x = np.asarray(mat["X"], dtype=np.uint8)
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3):
        raise DataError(f"{path}: 'X' has shape {x.shape}; expected (32, 32, 3, N)")
    y = np.asarray(mat["y"], dtype=np.int64).ravel() % 10
    return ImageSet(np.ascontiguousarray(x.transpose(3, 0, 1, 2)), y, str(path))


def read_cifar10c(root: str | Path, corruption: str, severity: int) -> ImageSet:
    """The 10000 test images of one published CIFAR-10-C corruption at one severity (1..5)."""
    folder = Path(root) / CIFAR10C_DIR
    path = folder / f"{corruption}.npy"
    for p in (path, folder / "labels.npy"):
        if not p.exists():
            raise DataError(f"{p} does not exist")
    x = np.load(path, mmap_mode="r")
    y = np.load(folder / "labels.npy")
    n = len(x) // 5
    if x.shape[1:] != (32, 32, 3) or len(x) != 5 * n or y.shape != (len(x),):
        raise DataError(
            f"{path}: shape {x.shape} with {len(y)} labels; expected (5 × 10000, 32, 32, 3) images and as many labels"
        )
    rows = slice((severity - 1) * n, severity * n)
    return ImageSet(np.asarray(x[rows], dtype=np.uint8), y[rows].astype(np.int64), f"{path}[severity {severity}]")


def has_cifar10c(root: str | Path, corruption: str) -> bool:
    folder = Path(root) / CIFAR10C_DIR
    return (folder / f"{corruption}.npy").exists() and (folder / "labels.npy").exists()


READERS = {"cifar10": read_cifar10, "cifar100": read_cifar100, "svhn": read_svhn}
TV_CLASSES = {"cifar10": "CIFAR10", "cifar100": "CIFAR100", "svhn": "SVHN"}


def load_images(name: str, root: str | Path, split: str, download: bool = False) -> ImageSet:
    """Read ``name`` in {cifar10, cifar100, svhn}; download it through torchvision when absent."""
    if name not in READERS:
        raise DataError(f"unknown image set '{name}'; choose one of {sorted(READERS)}")
    try:
        return READERS[name](root, split)
    except DataError as missing:
        if not download:
            raise DataError(
                f"{missing}; download {URLS[name].format(split=split)} into {root} "
                "(torchvision's layout) or allow the download"
            ) from None
    tvd = torchvision("datasets", f"downloading {name}")

    kwargs = {"split": split} if name == "svhn" else {"train": split == "train"}
    try:
        getattr(tvd, TV_CLASSES[name])(str(root), download=True, **kwargs)
    except Exception as e:  # no network, a read-only root, a bad checksum
        raise MissingData(
            f"{name} {split} is not under {root} and torchvision could not download it "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); fetch "
            f"{URLS[name].format(split=split)} elsewhere and unpack it into {root}"
        ) from None
    return READERS[name](root, split)


# ---------------------------------------------------------------------------- offline real images
def digits_images(size: int = 32) -> ImageSet:
    """scikit-learn's 1797 real 8×8 handwritten digits, bilinearly upscaled to ``size``² RGB."""
    import torch
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.as_tensor(d.images, dtype=torch.float32)[:, None] / 16.0
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    img = (x.clamp(0, 1) * 255).round().to(torch.uint8).repeat(1, 3, 1, 1).permute(0, 2, 3, 1)
    return ImageSet(img.numpy(), d.target.astype(np.int64), "sklearn.datasets.load_digits")


def photo_patches(size: int = 32, window: int = 64, stride: int = 32) -> ImageSet:
    """``window``² crops of scikit-learn's two sample photographs (china.jpg, flower.jpg) every
    ``stride`` pixels, resized to ``size``²; labels are -1 (no class)."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    crops = []
    for photo in load_sample_images().images:
        h, w, _ = photo.shape
        for top in range(0, h - window + 1, stride):
            for left in range(0, w - window + 1, stride):
                crop = Image.fromarray(photo[top : top + window, left : left + window])
                crops.append(np.asarray(crop.resize((size, size), Image.BILINEAR)))
    return ImageSet(
        np.stack(crops).astype(np.uint8),
        np.full(len(crops), -1, dtype=np.int64),
        "sklearn.datasets.load_sample_images (china.jpg, flower.jpg)",
    )


# ---------------------------------------------------------------------------- corruptions
# Two parameter sets (the named switch ``corruption_params``):
# * "imagenet_c": ImageNet-C's severities for every corruption, as imagecorruptions.corrupt applies them; its
#   four noise corruptions (every default) are computed here, the same arrays from the same seed, so only the
#   others (blur, weather, digital) need the optional imagecorruptions package, which brings OpenCV;
# * "cifar10_c": the noise corruptions with the severities of Hendrycks & Dietterich's make_cifar_c.py,
#   i.e. the distribution of the published CIFAR-10-C files (ImageNet-C's noise is 2-5x stronger).
IMAGENET_C_NOISE = {
    "gaussian_noise": (0.08, 0.12, 0.18, 0.26, 0.38),
    "shot_noise": (60, 25, 12, 5, 3),
    "impulse_noise": (0.03, 0.06, 0.09, 0.17, 0.27),
    "speckle_noise": (0.15, 0.2, 0.35, 0.45, 0.6),
}
CIFAR10C_NOISE = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),
    "shot_noise": (500, 250, 100, 75, 50),
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),
    "speckle_noise": (0.06, 0.1, 0.12, 0.16, 0.2),
}
CORRUPTION_PARAMS = ("imagenet_c", "cifar10_c")


def _imagecorruptions():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its pkg_resources import warns (needs setuptools<81)
        try:
            import imagecorruptions
        except ImportError as e:
            raise ImportError(
                f"corruptions other than {', '.join(IMAGENET_C_NOISE)} need imagecorruptions with "
                f"setuptools<81 ({e}); pip install -e '.[corruptions]'"
            ) from None
    return imagecorruptions


def stable_seed(*parts) -> int:
    """A 32-bit seed derived from ints and strings, identical across processes and runs."""
    keys = [p if isinstance(p, int) else zlib.crc32(str(p).encode()) for p in parts]
    return int(np.random.SeedSequence(keys).generate_state(1)[0])


def check_corruption(corruption: str, severity: int, params: str = "imagenet_c") -> None:
    """Fail early, with one line, on an unknown or (in this environment) broken corruption."""
    if params not in CORRUPTION_PARAMS:
        raise DataError(f"unknown corruption_params '{params}'; choose one of {list(CORRUPTION_PARAMS)}")
    if int(severity) not in range(1, 6):
        raise DataError(f"severity of {corruption} must be 1..5, got {severity}")
    if params == "cifar10_c":
        if corruption not in CIFAR10C_NOISE:
            raise DataError(
                f"corruption_params=cifar10_c covers {sorted(CIFAR10C_NOISE)}, not '{corruption}'; "
                "use corruption_params=imagenet_c (imagecorruptions) for it"
            )
        return
    if corruption in IMAGENET_C_NOISE:
        return
    ic = _imagecorruptions()
    names = ic.get_corruption_names("all")
    if corruption not in names:
        raise DataError(f"unknown corruption '{corruption}'; choose one of {names}")
    try:
        ic.corrupt(np.zeros((32, 32, 3), np.uint8), corruption_name=corruption, severity=int(severity))
    except Exception as e:  # glass_blur, gaussian_blur and fog fail with current scikit-image/NumPy
        raise DataError(f"corruption '{corruption}' fails here ({type(e).__name__}: {e}); choose another") from None


def cifar10c_noise(images: np.ndarray, corruption: str, severity: int, rng: np.random.Generator) -> np.ndarray:
    """make_cifar_c.py's noise corruptions on uint8 images (N, H, W, 3), vectorised over the batch."""
    c = CIFAR10C_NOISE[corruption][int(severity) - 1]
    x = images.astype(np.float64) / 255.0
    if corruption == "gaussian_noise":
        x = x + rng.normal(size=x.shape, scale=c)
    elif corruption == "shot_noise":
        x = rng.poisson(x * c) / c
    elif corruption == "impulse_noise":  # skimage.util.random_noise(mode="s&p", amount=c): salt = pepper
        flip, salt = rng.random(x.shape) < c, rng.random(x.shape) < 0.5
        x = np.where(flip, salt.astype(np.float64), x)
    else:  # speckle_noise
        x = x + x * rng.normal(size=x.shape, scale=c)
    return np.uint8(np.clip(x, 0, 1) * 255)  # truncation, as make_cifar_c.py saves


def imagenet_c_noise(image: np.ndarray, corruption: str, severity: int) -> np.ndarray:
    """``imagecorruptions.corrupt``'s noise corruption of one uint8 image (H, W, 3), drawing from NumPy's global
    RNG as it does (impulse_noise: ``skimage.util.random_noise`` with an ``rng`` drawn from it)."""
    import skimage.util

    c = IMAGENET_C_NOISE[corruption][int(severity) - 1]
    x = np.asarray(image) / 255.0
    if corruption == "gaussian_noise":
        x = x + np.random.normal(size=x.shape, scale=c)
    elif corruption == "shot_noise":
        x = np.random.poisson(x * c) / float(c)
    elif corruption == "impulse_noise":
        x = skimage.util.random_noise(x, mode="s&p", amount=c, rng=np.random.randint(2**31))
    else:  # speckle_noise
        x = x + x * np.random.normal(size=x.shape, scale=c)
    return np.uint8(np.clip(x, 0, 1) * 255)


def corrupt_images(
    images: np.ndarray, corruption: str, severity: int, seed: int, params: str = "imagenet_c"
) -> np.ndarray:
    """Corrupt every uint8 image (N, H, W, 3) reproducibly from ``seed``.

    "imagenet_c" corrupts image by image as ``imagecorruptions.corrupt`` does (its noise corruptions by
    :func:`imagenet_c_noise`, the others by that package), drawing from NumPy's global RNG, seeded here and
    restored after. imagecorruptions' impulse_noise calls ``skimage.util.random_noise``, which makes a fresh
    generator; for the duration of the call that function gets an ``rng`` drawn from the global one.
    """
    if params == "cifar10_c":
        return cifar10c_noise(images, corruption, severity, np.random.default_rng(seed))
    import skimage.util

    state = np.random.get_state()
    np.random.seed(seed)
    try:
        if corruption in IMAGENET_C_NOISE:
            return np.stack([imagenet_c_noise(img, corruption, severity) for img in images])
        ic, random_noise = _imagecorruptions(), skimage.util.random_noise
        skimage.util.random_noise = lambda *a, **k: random_noise(*a, rng=np.random.randint(2**31), **k)
        try:
            return np.stack(
                [
                    ic.corrupt(np.ascontiguousarray(img), corruption_name=corruption, severity=int(severity))
                    for img in images
                ]
            ).astype(np.uint8)
        finally:
            skimage.util.random_noise = random_noise
    finally:
        np.random.set_state(state)
