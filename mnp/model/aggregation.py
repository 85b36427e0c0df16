"""Aggregating the modalities into the latent z (eq. 8, MBA) and the ablations ``mean`` and ``concat``.

Inputs are stacked over modalities: r*, s* (M, B, d_e) and the priors u, q (M, 1, d_e) or (M, B, d_e).
Every aggregator returns the multimodal posterior ``(mu (B, d), var (B, d) or None)`` and the
unimodal ones ``(mu (M, B, d), var (M, B, d) or None)``; ``var=None`` marks a deterministic z.
"""

from __future__ import annotations

from itertools import combinations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mnp.checks import choice
from mnp.model.encoders import LEAKY_SLOPE

AGGREGATIONS = ("mba", "mean", "concat")


def mba_posterior(
    r_star: Tensor, s_star: Tensor, u: Tensor, q: Tensor, weights: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Gaussian posterior of z from M Gaussian observations and M Gaussian prior factors (eq. 8).

    σ²_z = 1 / Σ_m w_m (1/s*_m + 1/q_m),  μ_z = σ²_z · Σ_m w_m (r*_m / s*_m + u_m / q_m);
    ``weights`` (B, M) in {0, 1} drops modalities per target (default: all ones).
    """
    precision = 1.0 / s_star + 1.0 / q
    weighted = r_star / s_star + u / q
    if weights is not None:
        w = weights.t().unsqueeze(-1).to(precision.dtype)  # (M, B, 1)
        precision, weighted = precision * w, weighted * w
    var = 1.0 / precision.sum(0)
    return var * weighted.sum(0), var


def unimodal_posteriors(r_star: Tensor, s_star: Tensor, u: Tensor, q: Tensor) -> tuple[Tensor, Tensor]:
    """Eq. 8 with a single modality term each: (M, B, d) means and variances."""
    var = 1.0 / (1.0 / s_star + 1.0 / q)
    return var * (r_star / s_star + u / q), var


TABLE_VIEWS = 12  # up to this many modalities the masks are drawn from the table of all 2^M − M − 1 subsets


def subset_table(num_views: int) -> Tensor:
    """(S, M) indicator rows of every subset of at least 2 modalities (all of them when M ≤ 2)."""
    subsets = [c for r in range(2, num_views + 1) for c in combinations(range(num_views), r)] or [
        tuple(range(num_views))
    ]
    return torch.tensor([[float(m in c) for m in range(num_views)] for c in subsets])


def size_cdf(num_views: int) -> Tensor:
    """(M + 1,) P(|subset| ≤ k) of a uniform subset of at least 2 of M modalities: C(M, k) / (2^M − M − 1)."""
    k = torch.arange(num_views + 1, dtype=torch.float64)
    log_count = (
        torch.lgamma(torch.tensor(num_views + 1.0, dtype=torch.float64))
        - torch.lgamma(k + 1)
        - torch.lgamma(num_views - k + 1)
    )
    weight = torch.where(k >= 2, torch.exp(log_count - log_count.max()), torch.zeros_like(k))
    return (weight.cumsum(0) / weight.sum()).float()


def modality_draws(num_views: int) -> Tensor:
    """What :func:`random_modality_mask` draws from: :func:`subset_table` for M ≤ TABLE_VIEWS, else
    :func:`size_cdf` (the table would have 2^M rows: 30 or more views exhaust the memory)."""
    return subset_table(num_views) if num_views <= TABLE_VIEWS else size_cdf(num_views)


def random_modality_mask(batch: int, num_views: int, device: torch.device, draws: Tensor | None = None) -> Tensor:
    """(B, M) masks, each a uniformly drawn subset of at least 2 modalities (all of them when M ≤ 2).

    The official code draws this subset once when the graph is traced; here it is redrawn every call.
    ``draws``: :func:`modality_draws` already on the device (MNP keeps it, so a training step makes no
    tensor from Python data). Up to TABLE_VIEWS modalities a row of the table is drawn; beyond, a subset size
    from its distribution, then that many modalities by a random permutation: the same distribution, without
    the table and without a host sync.
    """
    draws = modality_draws(num_views).to(device) if draws is None else draws
    if num_views <= TABLE_VIEWS:
        return draws[torch.randint(draws.shape[0], (batch,), device=device)]
    size = torch.searchsorted(draws, torch.rand(batch, 1, device=device), right=True).clamp_max(num_views)
    order = torch.rand(batch, num_views, device=device).argsort(1)
    ranks = torch.arange(num_views, device=device).expand(batch, -1)
    return torch.zeros(batch, num_views, device=device).scatter_(1, order, (ranks < size).float())


class Aggregation(nn.Module):
    """The aggregators' shared interface: ``forward`` (multimodal), ``unimodal`` and ``posteriors`` (both)."""

    def posteriors(self, r_star, s_star, u, q, weights=None):
        """The multimodal and the unimodal posteriors, ((mu, var), (mu_m, var_m))."""
        return self(r_star, s_star, u, q, weights), self.unimodal(r_star, s_star, u, q)


class MBA(Aggregation):
    """Multimodal Bayesian aggregation (eq. 8); unimodal posteriors use a single term each."""

    def forward(self, r_star, s_star, u, q, weights=None):
        return mba_posterior(r_star, s_star, u, q, weights)

    def unimodal(self, r_star, s_star, u, q):
        return unimodal_posteriors(r_star, s_star, u, q)

    def posteriors(self, r_star, s_star, u, q, weights=None):
        """Both, with each modality's terms 1/s*_m + 1/q_m and r*_m/s*_m + u_m/q_m computed once (the
        same values as :func:`mba_posterior` and :func:`unimodal_posteriors`)."""
        precision = 1.0 / s_star + 1.0 / q
        weighted = r_star / s_star + u / q
        var_m = 1.0 / precision
        unimodal = var_m * weighted, var_m
        if weights is not None:
            w = weights.t().unsqueeze(-1).to(precision.dtype)  # (M, B, 1)
            precision, weighted = precision * w, weighted * w
        var = 1.0 / precision.sum(0)
        return (var * weighted.sum(0), var), unimodal


class MeanAggregation(Aggregation):
    """Ablation ``mean``: z = (1/M) Σ_m r*_m, deterministic; the unimodal z is r*_m."""

    def forward(self, r_star, s_star, u, q, weights=None):
        if weights is None:
            return r_star.mean(0), None
        w = weights.t().unsqueeze(-1).to(r_star.dtype)
        return (r_star * w).sum(0) / w.sum(0), None

    def unimodal(self, r_star, s_star, u, q):
        return r_star, None


class ConcatAggregation(Aggregation):
    """Ablation ``concat``: z = MLP(cat_m r*_m), deterministic; the unimodal z is r*_m."""

    def __init__(self, num_views: int, d_e: int):
        super().__init__()
        self.fc1 = nn.Linear(num_views * d_e, d_e)
        self.fc2 = nn.Linear(d_e, d_e)

    def forward(self, r_star, s_star, u, q, weights=None):
        if weights is not None:
            r_star = r_star * weights.t().unsqueeze(-1).to(r_star.dtype)
        h = torch.cat(list(r_star), dim=-1)
        return self.fc2(F.leaky_relu(self.fc1(h), LEAKY_SLOPE)), None

    def unimodal(self, r_star, s_star, u, q):
        return r_star, None


def build_aggregation(name: str, num_views: int, d_e: int) -> nn.Module:
    choice("aggregation", name, AGGREGATIONS)
    if name == "mba":
        return MBA()
    if name == "mean":
        return MeanAggregation()
    return ConcatAggregation(num_views, d_e)
