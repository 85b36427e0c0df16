"""digits_c: the offline CIFAR10-C pipeline on real digit images, with a stand-in feature network."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from torch import nn

import datamodules.digits_c as dc
from datamodules import feature_cache as F
from datamodules.errors import DataError

CONF = Path(__file__).resolve().parents[1] / "conf"


class Pool8(nn.Module):
    """Stand-in for Inception-v3: 8×8 average pooling of the normalised image (192 features)."""

    calls = 0

    def forward(self, x):
        Pool8.calls += 1
        return nn.functional.adaptive_avg_pool2d(x, 8).flatten(1)


def stand_in_extractor(weights, input_size, seed, batch_size, device):
    return F.FeatureExtractor(Pool8, 32, 1024, "cpu", F.inception_description(weights, input_size, seed))


@pytest.fixture(autouse=True)
def stand_in(monkeypatch):
    monkeypatch.setattr(dc, "inception_extractor", stand_in_extractor)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One digits_c cache (cifar10_c noise: vectorised and fast) shared by the tests of this file."""
    root = tmp_path_factory.mktemp("digits_c")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dc, "inception_extractor", stand_in_extractor)
        Pool8.calls = 0
        dm = compose_dataset(root)
        dm.setup()
    return root, dm, Pool8.calls


def compose_dataset(feature_dir: Path, *overrides: str):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "dataset=digits_c",
                "model=mlp",
                f"dataset.feature_dir={feature_dir}",
                "dataset.corruption_params=cifar10_c",
                *overrides,
            ],
        )
    node = OmegaConf.to_container(cfg.dataset, resolve=True)
    assert node.pop("name") == "digits_c"
    return instantiate(node)


def test_digits_c_builds_its_cache_and_serves_views_and_photo_ood(cache):
    from sklearn.neighbors import NearestCentroid

    root, dm, calls = cache
    assert isinstance(dm, dc.DigitsC) and dm.extractor == {"weights": None, "input_size": 75, "seed": 0}
    assert calls == 3 * (3 + 1) + 1  # chunks of 512: train 1438 -> 3 and test 359 -> 1 per view; photos 1
    assert dm.view_dims == [192, 192, 192] and dm.num_classes == 10
    assert len(dm.train_y) + len(dm.test_y) == 1797 and set(dm.test_y.tolist()) == set(range(10))
    assert (root / "photos/feature/test_inceptionv3_feat.npy").exists()
    assert dm.ood_names == ["photos"]
    views, is_ood = dm.ood_sets["photos"]
    assert int((is_ood == 0).sum()) == len(dm.test_y) and int(is_ood.sum()) == 456
    x_tr = np.concatenate([v.numpy() for v in dm.train_views], 1)
    x_te = np.concatenate([v.numpy() for v in dm.test_views], 1)
    acc = NearestCentroid().fit(x_tr, dm.train_y.numpy()).score(x_te, dm.test_y.numpy())
    assert acc > 0.8  # the corrupted views still show the digit (chance: 0.1)


def test_second_run_reads_the_cache(cache):
    root, dm, _ = cache
    Pool8.calls = 0
    again = compose_dataset(root)
    again.setup()
    assert Pool8.calls == 0
    np.testing.assert_array_equal(again.test_views[2].numpy(), dm.test_views[2].numpy())


def test_digits_c_refuses_a_cache_built_with_other_settings(cache):
    root, _, _ = cache
    with pytest.raises(DataError, match="delete that directory"):
        compose_dataset(root, "dataset.split_seed=1").setup()


def test_heldout_digit_classes_add_a_second_ood_set(cache):
    dm = compose_dataset(cache[0], "dataset.ood_classes=[9]", "dataset.ood_n_ood=100")
    dm.setup()
    assert dm.num_classes == 9 and dm.ood_names == ["heldout", "photos"]
    assert int(dm.ood_sets["photos"][1].sum()) == 100
    assert int(dm.ood_sets["heldout"][1].sum()) == 180  # every 9 in the data
