"""Evaluation protocols (docs/method.md §5): noisy views and OOD set assembly."""
from __future__ import annotations

from itertools import combinations
from typing import Sequence

import numpy as np
import torch
from torch import Tensor


def default_noise_levels() -> list[float]:
    """σ ∈ logspace(−2, 1, 10), as in the paper."""
    return [float(s) for s in np.logspace(-2, 1, 10)]


def noise_subsets(num_views: int, size: int | None = None) -> list[tuple[int, ...]]:
    """Every subset of ⌊M/2⌋ views (or of ``size`` views) that receives noise; none when M = 1."""
    size = num_views // 2 if size is None else size
    if size == 0:
        return []  # a single view: no subset to corrupt, the protocol is skipped
    if not 1 <= size <= num_views:
        raise ValueError(f"noise subset size must lie in [1, {num_views}], got {size}")
    return list(combinations(range(num_views), size))


def sigma_key(sigma: float) -> str:
    """Stable metrics.json key fragment for a noise level, e.g. 0.0215."""
    return f"{sigma:.4g}"


def add_noise(views: Sequence[Tensor], subset: Sequence[int], sigma: float, generator: torch.Generator) -> list[Tensor]:
    """Return views with N(0, σ²) noise added to the views in ``subset`` (after scaling)."""
    out = list(views)
    for v in subset:
        noise = torch.randn(views[v].shape, generator=generator, device=views[v].device, dtype=views[v].dtype)
        out[v] = views[v] + sigma * noise
    return out


def noise_generator(device: torch.device, seed: int, batch_idx: int) -> torch.Generator:
    """A generator whose stream depends only on (seed, batch index), so noise is reproducible."""
    g = torch.Generator(device=device)
    g.manual_seed(int(seed) * 1_000_003 + int(batch_idx))
    return g
