"""Feature extraction and the resumable feature cache (official CIFAR10-C layout)."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import numpy as np
import pytest
from test_images import write_cifar10, write_cifar10c, write_cifar100, write_svhn
from torch import nn

from datamodules import feature_cache as F
from datamodules.errors import DataError, MissingData

CONF = Path(__file__).resolve().parents[1] / "conf"
CORR, SEV = ["gaussian_noise", "shot_noise", "impulse_noise"], [1, 3, 5]


class Pool(nn.Module):
    """Stand-in for Inception-v3: 4×4 average pooling of the normalised input (48 features); counts calls."""

    def __init__(self, fail_on_call: int | None = None):
        super().__init__()
        self.calls, self.fail_on_call = 0, fail_on_call

    def forward(self, x):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise KeyboardInterrupt("interrupted")
        return nn.functional.adaptive_avg_pool2d(x, 4).flatten(1)


def extractor(model: nn.Module, batch_size: int = 64) -> F.FeatureExtractor:
    return F.FeatureExtractor(
        lambda: model, input_size=40, batch_size=batch_size, device="cpu", description={"model": "pool4"}
    )


@pytest.fixture()
def image_dir(tmp_path):
    root = tmp_path / "images"
    ref = write_cifar10(root, n_per_batch=3, n_test=5)
    write_svhn(root, "test", n=7)
    write_cifar100(root, n_test=6)
    return root, ref


def build(root, image_dir, model, chunk_size=4, params="cifar10_c", published_test=True):
    jobs = F.cifar10c_jobs(root, image_dir, CORR, SEV, {"svhn": "svhn", "cifar100": "cifar100"}, params, published_test)
    return F.run_jobs(root, jobs, extractor(model), chunk_size, {"extractor": {"model": "pool4"}})


# ---------------------------------------------------------------------------- extractor
def test_extractor_resizes_normalises_and_batches():
    colours = np.array([[0, 128, 255], [255, 0, 64]], dtype=np.uint8)
    images = np.repeat(colours, 5, axis=0)[:, None, None, :].repeat(32, 1).repeat(32, 2)  # 10 flat images
    model, seen = Pool(), []
    feats = extractor(model, batch_size=4)(images, on_batch=seen.append)
    assert model.calls == 3 and seen == [4, 4, 2] and feats.shape == (10, 48) and feats.dtype == np.float32
    want = (colours / 255.0 - np.array(F.IMAGENET_MEAN)) / np.array(F.IMAGENET_STD)  # per channel
    np.testing.assert_allclose(feats[0].reshape(3, 16), np.repeat(want[0][:, None], 16, 1), atol=1e-5)
    np.testing.assert_allclose(feats[9].reshape(3, 16), np.repeat(want[1][:, None], 16, 1), atol=1e-5)


def test_inception_random_init_gives_2048d_features():
    x = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    ex = F.inception_extractor(None, input_size=75, seed=3, device="cpu")
    feats = ex(x)
    assert feats.shape == (2, 2048) and np.isfinite(feats).all() and not np.allclose(feats[0], feats[1])
    assert ex.description == {"model": "inception_v3", "weights": None, "input_size": 75, "seed": 3}
    with pytest.raises(ValueError, match="at least 75"):
        F.inception_extractor(None, input_size=32)


@pytest.mark.slow
def test_inception_random_init_is_seeded():
    x = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    a, b, c = (F.inception_extractor(None, input_size=75, seed=s, device="cpu")(x) for s in (3, 3, 4))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_without_torchvision_the_image_datasets_stop_in_one_line_naming_the_extra(monkeypatch, tmp_path):
    """torchvision is the `images` extra (its torch pin pulled CUDA torch into CPU-only installs): the default
    install lacks it, and the two places that need it say how to get it."""
    import sys

    import tomllib

    from datamodules.images import load_images

    for name in ("torchvision", "torchvision.models", "torchvision.datasets"):
        monkeypatch.setitem(sys.modules, name, None)  # `import` raises ImportError, as when not installed
    says = (
        "needs torchvision (import of torchvision.{} halted; None in sys.modules): pip install -e '.[images]' "
        "(on a CPU-only machine with --extra-index-url https://download.pytorch.org/whl/cpu)"
    )
    with pytest.raises(DataError) as e:
        F.inception_v3(None)
    assert str(e.value) == "the Inception-v3 features " + says.format("models")
    with pytest.raises(DataError) as e:
        load_images("svhn", tmp_path, "test", download=True)
    assert str(e.value) == "downloading svhn " + says.format("datasets")
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("torchvision")]
    assert project["optional-dependencies"]["images"] == ["torchvision>=0.26,<=0.29.1"]


def test_missing_weights_offline_say_where_to_put_them(monkeypatch):
    import torchvision.models

    def offline(*a, **k):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(torchvision.models, "inception_v3", offline)
    with pytest.raises(FileNotFoundError) as e:
        F.inception_v3("IMAGENET1K_V1")
    msg = str(e.value)
    assert "\n" not in msg and "checkpoints/inception_v3_google-0cc3c7bd.pth" in msg and "weights=null" in msg
    with pytest.raises(MissingData, match="does not exist"):  # a sweep skips the job (mnp.cli.sweep)
        F.inception_v3("/nonexistent/inception.pth")
    assert isinstance(e.value, MissingData)


# ---------------------------------------------------------------------------- cache
def test_cache_layout(tmp_path, image_dir):
    images, ref = image_dir
    root = tmp_path / "feat"
    assert build(root, images, Pool()) == 2 * 3 + 2
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == sorted(
        [
            "cache.json",
            "train/labels.npy",
            "test/labels.npy",
            "svhn/feature/test_inceptionv3_feat.npy",
            "cifar100/feature/test_inceptionv3_feat.npy",
        ]
        + [f"{s}/feature/{c}_severity_{v}_inceptionv3_feat.npy" for s in ("train", "test") for c, v in zip(CORR, SEV)]
    )
    np.testing.assert_array_equal(np.load(root / "train/labels.npy"), ref["train_y"])
    np.testing.assert_array_equal(np.load(root / "test/labels.npy"), ref["test_y"])
    assert np.load(F.feature_path(root, "train", "shot_noise", 3)).shape == (15, 48)
    assert np.load(F.ood_feature_path(root, "svhn")).shape == (7, 48)
    clean = extractor(Pool())(ref["test"])
    for c, v in zip(CORR, SEV):  # corrupted views differ from the clean images and from each other
        assert not np.allclose(np.load(F.feature_path(root, "test", c, v)), clean)
    meta = json.loads((root / "cache.json").read_text())
    assert meta["settings"] == {"extractor": {"model": "pool4"}}
    assert "cifar10_c" in meta["arrays"]["train/feature/impulse_noise_severity_5_inceptionv3_feat.npy"]


def test_resume_recomputes_nothing_and_matches(tmp_path, image_dir):
    images, _ = image_dir
    full = Pool()
    build(tmp_path / "full", images, full)  # chunks of 4: train 15 -> 4, test 5 -> 2, svhn 2, cifar100 2
    assert full.calls == 3 * (4 + 2) + 2 + 2
    root = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        build(root, images, Pool(fail_on_call=2))  # dies inside the second chunk of the first array
    first = F.feature_path(root, "train", "gaussian_noise", 1)
    assert not first.exists() and len(list(first.with_name(first.name + ".partial").glob("*.npy"))) == 1
    again = Pool()
    assert build(root, images, again) == 8
    assert again.calls == full.calls - 1  # only the finished chunk was skipped
    for p in (tmp_path / "full").rglob("*.npy"):
        np.testing.assert_array_equal(np.load(p), np.load(root / p.relative_to(tmp_path / "full")))
    assert not list(root.rglob("*.partial"))
    idle = Pool()
    assert build(root, images, idle) == 0 and idle.calls == 0


def test_published_cifar10c_test_view_is_read(tmp_path, image_dir):
    images, ref = image_dir
    published = write_cifar10c(images, "shot_noise", ref)
    root = tmp_path / "feat"
    build(root, images, Pool())
    np.testing.assert_allclose(
        np.load(F.feature_path(root, "test", "shot_noise", 3)), extractor(Pool())(published[2]), rtol=1e-6
    )
    meta = json.loads((root / "cache.json").read_text())
    assert meta["arrays"]["test/feature/shot_noise_severity_3_inceptionv3_feat.npy"].startswith("CIFAR-10-C/")
    other = tmp_path / "imagenet_c"
    build(other, images, Pool(), params="imagenet_c")  # other parameters: the published file does not apply
    assert (
        "imagenet_c"
        in json.loads((other / "cache.json").read_text())["arrays"][
            "test/feature/shot_noise_severity_3_inceptionv3_feat.npy"
        ]
    )


def test_cache_refuses_other_settings(tmp_path):
    F.update_cache_meta(tmp_path, {"extractor": {"weights": None}}, {})
    with pytest.raises(DataError, match="delete that directory"):
        F.update_cache_meta(tmp_path, {"extractor": {"weights": "IMAGENET1K_V1"}}, {})
    F.write_labels(tmp_path, "train", np.array([1, 2]))
    with pytest.raises(DataError, match="other labels"):
        F.write_labels(tmp_path, "train", np.array([2, 1]))


def test_features_command_config_builds_the_dataset_cache(tmp_path, image_dir, monkeypatch):
    """conf/features/cifar10c.yaml composes conf/dataset/cifar10c.yaml; build_cifar10c follows it."""
    from hydra import compose, initialize_config_dir

    images, _ = image_dir
    monkeypatch.setattr(F, "inception_v3", lambda weights, seed: Pool())
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "features/cifar10c",
            overrides=[
                f"paths.data_dir={images}",
                f"dataset.feature_dir={tmp_path / 'feat'}",
                "dataset.extractor.weights=null",
                "dataset.extractor.input_size=75",
                "chunk_size=8",
                "device=cpu",
                "download=false",
            ],
        )
    assert cfg.image_dir == str(images) and list(cfg.dataset.corruptions) == CORR
    root = F.build_cifar10c(cfg)
    assert len(list(root.rglob("*_inceptionv3_feat.npy"))) == 8
    settings = json.loads((root / "cache.json").read_text())["settings"]
    assert settings == {
        "extractor": F.inception_description(None, 75, 0),
        "corruption_params": "cifar10_c",
        "corruption_seed": 0,
    }
