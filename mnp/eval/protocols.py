"""Evaluation protocols (docs/method.md §5): noisy views and OOD set assembly."""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import combinations

import numpy as np
import torch
from torch import Tensor

from mnp.checks import is_int
from mnp.eval import metrics


def default_noise_levels() -> list[float]:
    """σ ∈ logspace(−2, 1, 10), as in the paper."""
    return [float(s) for s in np.logspace(-2, 1, 10)]


DEFAULT_MAX_SUBSETS = (
    64  # eval.noise_max_subsets: every dataset of the paper keeps all its subsets (at most C(6, 3) = 20)
)


def noise_subsets(
    num_views: int, size: int | None = None, max_subsets: int = DEFAULT_MAX_SUBSETS, seed: int = 0
) -> list[tuple[int, ...]]:
    """The subsets of ⌊M/2⌋ views (or of ``size`` views) that receive noise; none when M = 1.

    All C(M, k) of them in lexicographic order when there are at most ``max_subsets``; otherwise
    ``max_subsets`` distinct ones drawn uniformly from ``seed`` (``eval.noise_seed``), in lexicographic order.
    The combinations are never enumerated: C(60, 30) ≈ 1.2e17 subsets cost as little as 20."""
    size = num_views // 2 if size is None else size
    if size == 0:
        return []  # a single view: no subset to corrupt, the protocol is skipped
    if not 1 <= size <= num_views:
        raise ValueError(
            f"eval.noise_subset_size must lie in [1, {num_views}] (the data has {num_views} views), got {size}"
        )
    if not is_int(max_subsets) or max_subsets < 1:
        raise ValueError(f"eval.noise_max_subsets must be an integer >= 1, got {max_subsets!r}")
    total = math.comb(num_views, size)
    if total <= max_subsets:
        return list(combinations(range(num_views), size))
    rng = random.Random(int(seed))
    if total < sys.maxsize:  # random.sample needs len(range(total))
        ranks = rng.sample(range(total), max_subsets)
    else:  # max_subsets is a vanishing fraction of total: draw ranks until that many are distinct
        ranks = set()
        while len(ranks) < max_subsets:
            ranks.add(rng.randrange(total))
    return [unrank_subset(r, num_views, size) for r in sorted(ranks)]


def unrank_subset(rank: int, n: int, k: int) -> tuple[int, ...]:
    """The ``rank``-th k-subset of range(n) in lexicographic order (the combinatorial number system)."""
    out, first = [], 0
    for left in range(k, 0, -1):
        while rank >= (count := math.comb(n - first - 1, left - 1)):  # subsets that start with ``first``
            rank -= count
            first += 1
        out.append(first)
        first += 1
    return tuple(out)


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
    if not is_int(setting) or setting < 0:
        raise ValueError(f"eval.noise_batch_rows must be auto or an integer >= 0, got {setting!r}")
    return setting


def noisy_copies(
    views: Sequence[Tensor], subsets: Sequence[Sequence[int]], levels: Sequence[float], generator: torch.Generator
) -> Iterator[list[Tensor]]:
    """Every (σ, subset) noised copy of ``views``, one at a time, drawn from ``generator`` in the order of
    the per-call loop (σ, then subset), so each equals its :func:`add_noise`."""
    for sigma in levels:
        for subset in subsets:
            yield add_noise(views, subset, sigma, generator)


def predict_in_chunks(
    predict: Callable[[list[Tensor]], tuple[Tensor, Tensor]], copies: Iterable[Sequence[Tensor]], max_rows: int
) -> Tensor:
    """Mean probabilities (N, K) on the host of ``predict`` over ``copies`` stacked along the batch axis, in
    calls of at most ``max_rows`` rows with one device-to-host copy each. Copies are drawn as the calls need
    them, so at most one call's rows (plus one copy) are held at a time."""
    out: list[Tensor] = []
    pending: list[Sequence[Tensor]] = []
    held = 0
    for copy in copies:
        pending.append(copy)
        held += copy[0].shape[0]
        while held >= max_rows:
            stacked = [torch.cat(parts) for parts in zip(*pending)]
            out.append(predict([v[:max_rows] for v in stacked])[0].mean(0).float().cpu())
            held -= max_rows
            pending = [[v[max_rows:] for v in stacked]] if held else []
    if held:
        out.append(predict([torch.cat(parts) for parts in zip(*pending)])[0].mean(0).float().cpu())
    return torch.cat(out)


EVAL_SPLITS = ("test", "val")


def check_split(split: str) -> str:
    """``eval.split``: ``test`` (the report) or ``val`` (the selection protocol, docs/method.md §5.4)."""
    if split not in EVAL_SPLITS:
        raise ValueError(f"eval.split must be one of {', '.join(EVAL_SPLITS)}, got {split!r}")
    return split


def validation_names(values: dict) -> dict:
    """The evaluation's keys renamed for the validation rows: ``test/acc`` -> ``val/acc``, ``noise/acc@1`` ->
    ``val/noise/acc@1``, ``missing/...`` -> ``val/missing/...``; timings keep their names."""

    def name(key: str) -> str:
        if key.startswith("time/"):
            return key
        return "val/" + (key[len("test/") :] if key.startswith("test/") else key)

    return {name(k): v for k, v in values.items()}


def sample_generator(device: torch.device, seed: int, dataloader_idx: int, batch_idx: int) -> torch.Generator:
    """The generator a test batch's predictions sample from (Monte Carlo draws, MC dropout): seeded by the
    run's seed and the batch alone, so train-then-test, a resumed run and evaluate.py give the same numbers
    whatever the process did before (the global RNG's state depends on how many epochs it trained). The
    missing-view protocol's removal set i draws from the generator of ``dataloader_idx`` −(i + 1)."""
    g = torch.Generator(device=device)
    g.manual_seed(((int(seed) * 1_000_003 + int(dataloader_idx)) * 1_000_003 + int(batch_idx)) % (1 << 63))
    return g


def noise_results(noisy: dict, labels: Tensor, levels: Sequence[float], n_bins: int) -> tuple[dict, dict]:
    """The noise protocol's metrics from each level's predictions (a list of (n_subsets, B, K) per level, pooled
    over subsets): ``noise/acc@σ``, ``noise/ece@σ`` and their means over σ, and the per-σ curve's arrays."""
    results, accs, eces = {}, [], []
    for sigma in levels:
        p = torch.cat(noisy[sigma], dim=1)  # (n_subsets, N, K)
        pooled_p, pooled_y = p.reshape(-1, p.shape[-1]), labels.repeat(p.shape[0])
        accs.append(metrics.accuracy(pooled_p, pooled_y))
        eces.append(metrics.ece(pooled_p, pooled_y, n_bins))
        results[f"noise/acc@{sigma_key(sigma)}"], results[f"noise/ece@{sigma_key(sigma)}"] = accs[-1], eces[-1]
    results["noise/acc_mean"], results["noise/ece_mean"] = float(np.mean(accs)), float(np.mean(eces))
    return results, {"noise/sigma": np.asarray(levels), "noise/acc": np.asarray(accs)}
