"""Noise protocol and OOD assembly (docs/method.md §5)."""
import numpy as np
import pytest
import torch

from datamodules.cifar10c import ood_mix
from mnp.core import protocols


@pytest.mark.parametrize("m,count", [(6, 20), (3, 3), (2, 2), (1, 0)])
def test_noise_subsets_enumerate(m, count):
    # handwritten (6 views) -> C(6,3)=20, pie/scene15 (3) -> 3, cub (2) -> 2
    subsets = protocols.noise_subsets(m)
    assert len(subsets) == count
    assert all(len(s) == m // 2 for s in subsets)
    assert len(set(subsets)) == count


def test_default_noise_levels():
    levels = protocols.default_noise_levels()
    assert len(levels) == 10 and levels[0] == pytest.approx(0.01) and levels[-1] == pytest.approx(10.0)
    assert np.allclose(np.diff(np.log10(levels)), 1 / 3)


def test_add_noise_only_touches_subset_and_is_reproducible():
    views = [torch.zeros(1000, 3), torch.zeros(1000, 4), torch.zeros(1000, 2)]
    g1 = protocols.noise_generator(torch.device("cpu"), seed=1, batch_idx=0)
    noisy = protocols.add_noise(views, (0, 2), 2.0, g1)
    assert torch.equal(noisy[1], views[1])
    assert noisy[0].std().item() == pytest.approx(2.0, rel=0.05)
    g2 = protocols.noise_generator(torch.device("cpu"), seed=1, batch_idx=0)
    assert torch.equal(protocols.add_noise(views, (0, 2), 2.0, g2)[0], noisy[0])


def test_ood_mix_without_replacement():
    id_views = [torch.arange(20.0)[:, None]]
    ood_views = [100 + torch.arange(30.0)[:, None]]
    views, is_ood = ood_mix(id_views, ood_views, 10, 25, torch.Generator().manual_seed(0))
    ids, oods = views[0][is_ood == 0, 0], views[0][is_ood == 1, 0]
    assert len(ids) == 10 and len(oods) == 25
    assert len(set(ids.tolist())) == 10 and len(set(oods.tolist())) == 25  # no duplicates
    assert ids.max() < 100 <= oods.min()
