"""Image readers in torchvision's on-disk formats, the torchvision download path, and corruptions."""

from __future__ import annotations

import pickle
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from datamodules import images as im
from datamodules.errors import DataError


# ---------------------------------------------------------------------------- tiny on-disk datasets
def tiny_images(n: int, seed: int) -> np.ndarray:
    """uint8 (n, 32, 32, 3) whose channels differ, so a wrong axis order cannot pass."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    x[..., 0] //= 4  # red darker than the others
    return x


def _pickle(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def _rows(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 3, 1, 2).reshape(len(x), -1)  # CIFAR stores R plane, G plane, B plane


def write_cifar10(root: Path, n_per_batch: int = 3, n_test: int = 4, seed: int = 0) -> dict:
    """cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}; returns the arrays written."""
    folder = root / im.CIFAR10_DIR
    out = {"train": tiny_images(5 * n_per_batch, seed), "test": tiny_images(n_test, seed + 1)}
    rng = np.random.default_rng(seed)
    out["train_y"], out["test_y"] = rng.integers(0, 10, 5 * n_per_batch), rng.integers(0, 10, n_test)
    for i in range(5):
        sl = slice(i * n_per_batch, (i + 1) * n_per_batch)
        _pickle(
            folder / f"data_batch_{i + 1}",
            {
                "batch_label": f"training batch {i + 1} of 5",
                "labels": out["train_y"][sl].tolist(),
                "data": _rows(out["train"][sl]),
                "filenames": [],
            },
        )
    _pickle(
        folder / "test_batch",
        {
            "batch_label": "testing batch 1 of 1",
            "labels": out["test_y"].tolist(),
            "data": _rows(out["test"]),
            "filenames": [],
        },
    )
    _pickle(
        folder / "batches.meta",
        {"label_names": [f"c{k}" for k in range(10)], "num_cases_per_batch": n_per_batch, "num_vis": 3072},
    )
    return out


def write_cifar100(root: Path, n_train: int = 5, n_test: int = 4, seed: int = 2) -> dict:
    folder = root / im.CIFAR100_DIR
    out = {"train": tiny_images(n_train, seed), "test": tiny_images(n_test, seed + 1)}
    rng = np.random.default_rng(seed)
    for split in ("train", "test"):
        out[f"{split}_y"] = rng.integers(0, 100, len(out[split]))
        _pickle(
            folder / split,
            {
                "filenames": [],
                "batch_label": split,
                "fine_labels": out[f"{split}_y"].tolist(),
                "coarse_labels": (out[f"{split}_y"] // 5).tolist(),
                "data": _rows(out[split]),
            },
        )
    _pickle(
        folder / "meta",
        {"fine_label_names": [f"f{k}" for k in range(100)], "coarse_label_names": [f"c{k}" for k in range(20)]},
    )
    return out


def write_svhn(root: Path, split: str = "test", n: int = 6, seed: int = 4) -> dict:
    x = tiny_images(n, seed)
    digits = np.arange(n) % 10
    root.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(
        root / f"{split}_32x32.mat",
        {"X": x.transpose(1, 2, 3, 0), "y": np.where(digits == 0, 10, digits)[:, None].astype(np.uint8)},
    )
    return {"images": x, "labels": digits}


def write_cifar10c(root: Path, corruption: str, test: dict, seed: int = 6) -> np.ndarray:
    """CIFAR-10-C/<corruption>.npy: 5 severities × the test images, and labels.npy; returns (5, n, ...)."""
    folder = root / im.CIFAR10C_DIR
    folder.mkdir(parents=True, exist_ok=True)
    x = np.stack([tiny_images(len(test["test"]), seed + s) for s in range(5)])
    np.save(folder / f"{corruption}.npy", x.reshape(-1, 32, 32, 3))
    np.save(folder / "labels.npy", np.tile(test["test_y"], 5).astype(np.uint8))
    return x


# ---------------------------------------------------------------------------- readers
def test_cifar10_roundtrip(tmp_path):
    ref = write_cifar10(tmp_path)
    for split in ("train", "test"):
        got = im.read_cifar10(tmp_path, split)
        assert got.images.dtype == np.uint8 and got.images.shape == ref[split].shape
        np.testing.assert_array_equal(got.images, ref[split])
        np.testing.assert_array_equal(got.labels, ref[f"{split}_y"])


def test_cifar100_roundtrip_uses_fine_labels(tmp_path):
    ref = write_cifar100(tmp_path)
    got = im.read_cifar100(tmp_path, "test")
    np.testing.assert_array_equal(got.images, ref["test"])
    np.testing.assert_array_equal(got.labels, ref["test_y"])
    assert got.labels.max() >= 20  # fine (100), not coarse (20) labels


def test_svhn_roundtrip_maps_10_to_0(tmp_path):
    ref = write_svhn(tmp_path)
    got = im.read_svhn(tmp_path, "test")
    np.testing.assert_array_equal(got.images, ref["images"])
    np.testing.assert_array_equal(got.labels, ref["labels"])


def test_cifar10c_severity_slices(tmp_path):
    ref = write_cifar10(tmp_path)
    x = write_cifar10c(tmp_path, "shot_noise", ref)
    for s in (1, 3, 5):
        got = im.read_cifar10c(tmp_path, "shot_noise", s)
        np.testing.assert_array_equal(got.images, x[s - 1])
        np.testing.assert_array_equal(got.labels, ref["test_y"])
    assert im.has_cifar10c(tmp_path, "shot_noise") and not im.has_cifar10c(tmp_path, "snow")


def test_bad_shapes_raise_data_error(tmp_path):
    _pickle(tmp_path / im.CIFAR100_DIR / "test", {"data": np.zeros((2, 100), np.uint8), "fine_labels": [0, 1]})
    with pytest.raises(DataError, match="3072"):
        im.read_cifar100(tmp_path, "test")
    scipy.io.savemat(tmp_path / "test_32x32.mat", {"X": np.zeros((2, 32, 32, 3), np.uint8), "y": np.ones((2, 1))})
    with pytest.raises(DataError, match=r"\(32, 32, 3, N\)"):
        im.read_svhn(tmp_path, "test")


# ---------------------------------------------------------------------------- download path
def test_missing_without_download_names_url(tmp_path):
    with pytest.raises(DataError, match="cifar-10-python.tar.gz") as e:
        im.load_images("cifar10", tmp_path, "test", download=False)
    assert "\n" not in str(e.value)


def test_download_through_torchvision(tmp_path, monkeypatch):
    import torchvision.datasets as tvd

    calls = []

    class FakeSVHN:  # stands in for torchvision's download: writes the file torchvision would
        def __init__(self, root, split, download):
            calls.append((root, split, download))
            write_svhn(Path(root), split)

    monkeypatch.setattr(tvd, "SVHN", FakeSVHN)
    got = im.load_images("svhn", tmp_path, "test", download=True)
    assert calls == [(str(tmp_path), "test", True)] and len(got.images) == 6
    im.load_images("svhn", tmp_path, "test", download=True)
    assert len(calls) == 1  # present now: no second download


def test_offline_download_is_one_clear_line(tmp_path, monkeypatch):
    import torchvision.datasets as tvd

    def offline(*a, **k):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(tvd, "CIFAR100", offline)
    with pytest.raises(DataError, match="could not download") as e:
        im.load_images("cifar100", tmp_path, "test", download=True)
    assert "\n" not in str(e.value) and str(tmp_path) in str(e.value)


# ---------------------------------------------------------------------------- offline real images
def test_digits_images_are_the_upscaled_digits():
    from sklearn.datasets import load_digits

    d = im.digits_images(32)
    assert d.images.shape == (1797, 32, 32, 3) and d.images.dtype == np.uint8
    np.testing.assert_array_equal(d.labels, load_digits().target)
    pooled = d.images[..., 0].reshape(1797, 8, 4, 8, 4).mean((2, 4)) / 255 * 16  # back to 8×8, 0..16
    assert np.abs(pooled - load_digits().images).mean() < 1.5


def test_photo_patches_count_and_labels():
    p = im.photo_patches(32, window=64, stride=32)
    assert p.images.shape == (2 * 12 * 19, 32, 32, 3)  # two 427×640 photos
    assert (p.labels == -1).all() and p.images.std() > 20


# ---------------------------------------------------------------------------- corruptions
def test_corruption_is_seeded_and_restores_global_rng():
    x = im.digits_images(32).images[:8]
    for params in im.CORRUPTION_PARAMS:
        for c, s in (("gaussian_noise", 1), ("shot_noise", 3), ("impulse_noise", 5)):
            np.random.seed(123)
            a = im.corrupt_images(x, c, s, seed=7, params=params)
            after = np.random.random()
            np.random.seed(123)
            assert after == np.random.random()  # global state untouched
            np.testing.assert_array_equal(a, im.corrupt_images(x, c, s, seed=7, params=params))
            assert not np.array_equal(a, im.corrupt_images(x, c, s, seed=8, params=params))


@pytest.mark.parametrize("params,frac", [("cifar10_c", 0.07), ("imagenet_c", 0.27)])
def test_impulse_noise_severity_5_flips_the_published_fraction(params, frac):
    grey = np.full((20, 32, 32, 3), 128, np.uint8)
    out = im.corrupt_images(grey, "impulse_noise", 5, seed=0, params=params)
    flipped = np.isin(out, (0, 255)).mean()
    assert abs(flipped - frac) < 0.01


def test_cifar10c_gaussian_noise_std():
    grey = np.full((50, 32, 32, 3), 128, np.uint8)
    for s, c in enumerate(im.CIFAR10C_NOISE["gaussian_noise"], 1):
        out = im.corrupt_images(grey, "gaussian_noise", s, seed=s, params="cifar10_c")
        assert abs(out.std() / 255 - c) < 0.05 * c


def test_check_corruption_rejects_bad_names():
    im.check_corruption("impulse_noise", 5, "imagenet_c")
    with pytest.raises(DataError, match="unknown corruption"):
        im.check_corruption("rain", 1)
    with pytest.raises(DataError, match="imagenet_c"):
        im.check_corruption("snow", 1, "cifar10_c")
    with pytest.raises(DataError, match="1..5"):
        im.check_corruption("shot_noise", 6)


def test_imagenet_c_noise_is_imagecorruptions_without_it():
    """The four ImageNet-C noise corruptions (every default) give imagecorruptions.corrupt's arrays from the same
    seed, so the default install needs neither that package nor the OpenCV it brings."""
    import sys

    import tomllib

    deps = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in deps if d.startswith(("imagecorruptions", "opencv"))]  # they come with the extras only

    x = np.ascontiguousarray(im.digits_images(32).images[:6])
    for corruption in im.IMAGENET_C_NOISE:
        for severity in (1, 3, 5):
            sys.modules.pop("imagecorruptions", None)  # imported by an earlier test
            ours = im.corrupt_images(x, corruption, severity, seed=11)
            assert "imagecorruptions" not in sys.modules, corruption  # not imported for a noise corruption
            ic = im._imagecorruptions()
            np.random.seed(11)
            import skimage.util

            noise = skimage.util.random_noise
            skimage.util.random_noise = lambda *a, **k: noise(*a, rng=np.random.randint(2**31), **k)  # noqa: B023 - used in this iteration only
            try:
                theirs = np.stack([ic.corrupt(img, corruption_name=corruption, severity=severity) for img in x])
            finally:
                skimage.util.random_noise = noise
            np.testing.assert_array_equal(ours, theirs, err_msg=f"{corruption} s{severity}")
