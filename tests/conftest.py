"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from mnp.cli.resolvers import register_resolver

register_resolver()  # the configs' resolvers, for tests that compose and resolve configs (train.py registers them)


@pytest.fixture
def one_thread():
    """Run a test with one intra-op thread (small models on this shared 2-core machine), then restore."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---------------------------------------------------------------------------- data
def data_missing(reason: str) -> None:
    """Skip a test whose real data file is absent, but fail under CI (``CI`` set), where it must be there."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so the real data must be present: MNP_DATA_DIR=../shared/data)")
    pytest.skip(reason)


def data_dir() -> Path | None:
    root = os.environ.get("MNP_DATA_DIR")
    return Path(root) if root else None


@pytest.fixture
def real_file():
    """``real_file(dataset, name)``: the path of a real data file under $MNP_DATA_DIR, else skip (fail under CI)."""

    def get(dataset: str, name: str) -> Path:
        root = data_dir()
        if root is None:
            data_missing("MNP_DATA_DIR is not set (e.g. MNP_DATA_DIR=../shared/data)")
        path = root / dataset / name
        if not path.is_file():
            data_missing(f"{name} is not in {path.parent}/")
        return path

    return get


@pytest.fixture
def tiny_views():
    """A small separable 3-class, 2-view problem: views (36×5, 36×3), labels 0..2 (12 per class)."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 12)
    views = [rng.normal(size=(36, d)) + 3.0 * y[:, None] for d in (5, 3)]
    return views, y
