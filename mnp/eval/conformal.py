"""Split conformal prediction sets for every model (docs/method.md §5.7): ``eval.conformal=thr|aps|raps``.

A score s(x, y) says how unusual class y is for a row's mean probabilities p (sorted decreasingly as π, y at
1-based rank r, π summed above it ρ = Σ_{j<r} π_j):

* THR (Sadinle et al. 2019): s = 1 − p_y;
* APS (Romano et al. 2020), randomised: s = ρ + u·p_y with u ~ U(0, 1), one draw per row;
* RAPS (Angelopoulos et al. 2021): the APS score + λ·max(0, r − k_reg).

:meth:`SplitConformal.fit` scores the validation rows' true classes; q̂ is their ⌈(n + 1)(1 − α)⌉-th smallest
score, and a row's set holds every class y with s(x, y) ≤ q̂ (the same u for all its classes), so on exchangeable
rows P(y ∈ set) ≥ 1 − α. The uniform draws come from a ``torch.Generator`` seeded by the run's seed and one
stream per use (:func:`mnp.eval.protocols.sample_generator`), so a run's sets are reproducible.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from mnp.checks import is_finite, is_int
from mnp.eval.protocols import sample_generator

CONFORMALS = ("none", "thr", "aps", "raps")
RAPS_LAMBDA = 0.01  # eval.raps_lambda: the penalty per class beyond rank k_reg (the RAPS paper's grid holds 0.01)
RAPS_K_REG = 1  # eval.raps_k_reg: ranks free of the penalty (1: every class beyond the top one pays it)
CONFORMAL_LOADER = -3_000  # the generator index of the uniform draws (see mnp.eval.protocols.sample_generator)
VALIDATION_STREAM = 0  # the validation rows' draws; the test loop's clean rows (and predict_set) draw stream 1
SIZE_STRATA = (("<=1", 0, 1), ("2-3", 2, 3), (">=4", 4, None))  # coverage_size<stratum>: rows by their set's size


def check_conformal(method, alpha, lam, k_reg) -> None:
    """``eval.conformal``, ``eval.conformal_alpha``, ``eval.raps_lambda``, ``eval.raps_k_reg``: a ValueError naming
    the key of the first bad value."""
    if method not in CONFORMALS:
        raise ValueError(f"eval.conformal must be one of {', '.join(CONFORMALS)}, got {method!r}")
    if not is_finite(alpha) or not 0 < alpha < 1:
        raise ValueError(f"eval.conformal_alpha must be a number in (0, 1) (the sets miss at most that), got {alpha!r}")
    if not is_finite(lam) or lam < 0:
        raise ValueError(f"eval.raps_lambda must be a number >= 0, got {lam!r}")
    if not is_int(k_reg) or k_reg < 0:
        raise ValueError(f"eval.raps_k_reg must be an integer >= 0, got {k_reg!r}")


def quantile_rank(n: int, alpha: float) -> int:
    """⌈(n + 1)(1 − α)⌉, the rank of q̂ among n scores (1e-9 absorbs the float error of, e.g., 10 · 0.9)."""
    return math.ceil((n + 1) * (1 - alpha) - 1e-9)


def min_rows(alpha: float) -> int:
    """The fewest validation rows whose q̂ is a score (with fewer, every set would hold every class)."""
    n = 1
    while quantile_rank(n, alpha) > n:
        n += 1
    return n


def class_scores(probs: Tensor, u: Tensor | None, method: str, lam: float = 0.0, k_reg: int = 0) -> Tensor:
    """The score of every class (N, K) of probabilities (N, K), in float64; ``u`` (N,): APS/RAPS's draws."""
    p = probs.double()
    if method == "thr":
        return 1 - p
    order = p.argsort(dim=-1, descending=True, stable=True)
    ranked = p.gather(-1, order)
    rank = torch.arange(1, p.shape[-1] + 1, dtype=torch.float64)
    s = ranked.cumsum(-1) - ranked + u.double()[:, None] * ranked
    if method == "raps":
        s = s + lam * (rank - k_reg).clamp_min(0)
    return torch.empty_like(s).scatter_(-1, order, s)


class SplitConformal:
    """Split conformal sets of one score: :meth:`fit` on validation rows, ``conformal(probs, stream)`` the sets."""

    def __init__(self, method: str, alpha: float, lam: float = RAPS_LAMBDA, k_reg: int = RAPS_K_REG, seed: int = 0):
        self.method, self.alpha, self.lam, self.k_reg, self.seed = method, float(alpha), float(lam), int(k_reg), seed

    def uniform(self, n: int, stream: int) -> Tensor | None:
        """n draws of U(0, 1) from the run's generator of ``stream`` (None for THR, which draws none)."""
        if self.method == "thr":
            return None
        g = sample_generator(torch.device("cpu"), self.seed, CONFORMAL_LOADER, stream)
        return torch.rand(n, generator=g, dtype=torch.float64)

    def scores(self, probs: Tensor, stream: int, u: Tensor | None = None) -> Tensor:
        u = self.uniform(probs.shape[0], stream) if u is None else u
        return class_scores(probs, u, self.method, self.lam, self.k_reg)

    def fit(self, probs: Tensor, labels: Tensor, u: Tensor | None = None) -> SplitConformal:
        """Score the validation rows' classes (``u``: given draws, else the run's); rows not finite are left out."""
        s = self.scores(probs, VALIDATION_STREAM, u).gather(-1, torch.as_tensor(labels).long()[:, None])[:, 0]
        self.calibration_scores = s[torch.isfinite(probs).all(-1)].sort().values
        self.qhat = self.quantile(self.alpha)
        return self

    def quantile(self, alpha: float) -> float:
        """q̂ at ``alpha`` from the stored validation scores; inf where there are too few of them."""
        rank = quantile_rank(len(self.calibration_scores), alpha)
        return float(self.calibration_scores[rank - 1]) if rank <= len(self.calibration_scores) else math.inf

    def __call__(self, probs: Tensor, stream: int = 1, alpha: float | None = None, u: Tensor | None = None) -> Tensor:
        """Boolean sets (..., K) of probabilities (..., K): the classes scored at most q̂ (of ``alpha``, if given).
        A row that is not finite gets the empty set."""
        qhat = self.qhat if alpha is None else self.quantile(alpha)
        flat = probs.reshape(-1, probs.shape[-1])
        return (self.scores(flat, stream, u) <= qhat).reshape(probs.shape)


def set_metrics(sets: Tensor, labels: Tensor, strata: bool = False) -> dict[str, float]:
    """``coverage`` (the true class in the set) and ``size`` (the mean set size) of sets (N, K); with ``strata``,
    ``coverage_size<=1``, ``coverage_size2-3``, ``coverage_size>=4``: the coverage of the rows whose set has that
    size (NaN where none has), and ``ssc``, the least of them (size-stratified coverage, Angelopoulos et al.)."""
    if not len(labels):  # every row lost its last view
        return {"coverage": float("nan"), "size": float("nan")}
    hit = sets.gather(-1, labels.long()[:, None])[:, 0].double()
    size = sets.sum(-1)
    out = {"coverage": hit.mean().item(), "size": size.double().mean().item()}
    if strata:
        cov = []
        for name, lo, hi in SIZE_STRATA:
            rows = (size >= lo) & (size <= (hi if hi is not None else sets.shape[-1]))
            out[f"coverage_size{name}"] = hit[rows].mean().item() if rows.any() else float("nan")
            cov += [out[f"coverage_size{name}"]] if rows.any() else []
        out["ssc"] = float(np.min(cov))
    return out
