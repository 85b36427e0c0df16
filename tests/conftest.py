"""Shared pytest fixtures."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def one_thread():
    """Run a test with one intra-op thread (small models on this shared 2-core machine), then restore."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---------------------------------------------------------------------------- data
@pytest.fixture
def real_file():
    """``real_file(dataset, name)``: the path of a real data file under $MNP_DATA_DIR, else skip."""
    def get(dataset: str, name: str) -> Path:
        root = os.environ.get("MNP_DATA_DIR")
        if not root:
            pytest.skip("MNP_DATA_DIR is not set (e.g. MNP_DATA_DIR=/work/shared/data)")
        path = Path(root) / dataset / name
        if not path.is_file():
            pytest.skip(f"{name} is not in {path.parent}/")
        return path
    return get


@pytest.fixture
def tiny_views():
    """A small separable 3-class, 2-view problem: views (36×5, 36×3), labels 0..2 (12 per class)."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 12)
    views = [rng.normal(size=(36, d)) + 3.0 * y[:, None] for d in (5, 3)]
    return views, y
