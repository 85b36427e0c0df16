"""Evaluation protocols (docs/method.md §5): noisy views and OOD set assembly."""
from __future__ import annotations

from itertools import combinations
from typing import Callable, Sequence

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


def resolve_noise_batch_rows(setting: int | str, device: torch.device) -> int:
    """``eval.noise_batch_rows`` for a model on ``device``: ``auto`` is 0 (one call per σ and subset, the
    committed CPU numbers bit for bit) on the CPU and 65536 on an accelerator; an int ≥ 0 is itself."""
    if setting == "auto":
        return 0 if torch.device(device).type == "cpu" else 65536
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 0:
        raise ValueError(f"eval.noise_batch_rows must be auto or an integer >= 0, got {setting!r}")
    return setting


def noisy_copies(views: Sequence[Tensor], subsets: Sequence[Sequence[int]], levels: Sequence[float],
                 generator: torch.Generator) -> list[Tensor]:
    """Every (σ, subset) noised copy of ``views``, drawn from ``generator`` in the order of the per-call loop
    (σ, then subset) so each equals its :func:`add_noise`, stacked along the batch axis: view v becomes
    (len(levels) · len(subsets) · B, d_v), block (i, j) holding σ_i on subset j (that many times the batch's
    memory: the chunking of :func:`predict_in_chunks` bounds the model's activations, not these inputs)."""
    copies = [add_noise(views, s, sigma, generator) for sigma in levels for s in subsets]
    return [torch.cat(parts) for parts in zip(*copies)]


def predict_in_chunks(predict: Callable[[list[Tensor]], tuple[Tensor, Tensor]], views: Sequence[Tensor],
                      max_rows: int) -> Tensor:
    """Mean probabilities (N, K) of ``predict`` on the host, run on at most ``max_rows`` rows at a time
    (bounding the model's memory), with one device-to-host copy per call."""
    n = views[0].shape[0]
    return torch.cat([predict([v[i:i + max_rows] for v in views])[0].mean(0).float().cpu()
                      for i in range(0, n, max_rows)])
