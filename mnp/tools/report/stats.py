"""Statistics over seeds for :mod:`mnp.tools.report`: the 95 % t-interval of a mean and the paired test of a claim.

* Interval: mean ± t_{0.975, n−1} · s / √n, s the sample standard deviation (ddof = 1); none for n < 2.
* Claim "MNP beats X on metric M": a two-sided paired t-test (:func:`scipy.stats.ttest_rel`) over the seeds
  both cells have. When every difference is the same the test is undefined: p = 0 if that difference is
  nonzero, 1 if it is zero. Fewer than 2 shared seeds: no test. Verdict at α = 0.05: ``holds`` (the
  difference favours MNP), ``does not hold`` (it favours X), ``not significant``, ``too few seeds``.
* Many claims at once: :func:`holm` adjusts one family's p-values (Holm–Bonferroni).
* Test rows: :func:`row_bootstrap`, a paired two-level bootstrap over seeds and test rows, for claims whose runs'
  per-row predictions are kept (the seed t-test alone ignores that every seed reads the same test rows).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats as st

LEVEL = 0.95
ALPHA = 0.05
TOO_FEW = "too few seeds"
# relative size below which differences count as equal (float noise of a − b)
EQUAL_TOL = 1e-12


def t_interval(values, level: float = LEVEL) -> tuple[float, float] | None:
    """The ``level`` t-interval of the mean of ``values``; None for fewer than 2 values."""
    a = np.asarray(values, dtype=float)
    if len(a) < 2:
        return None
    half = st.t.ppf(0.5 + level / 2, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a))
    return float(a.mean() - half), float(a.mean() + half)


def higher_is_better(metric: str) -> bool:
    """Direction of a metrics.json key: accuracies, AUROC and a conformal set's coverage up; ECE, NLL, Brier and a
    set's size down (sets that keep coverage under noise, and small sets, are better)."""
    leaf = metric.split("/")[-1]
    if leaf.startswith(("acc", "coverage")) or leaf == "auroc":
        return True
    if leaf.startswith(("ece", "nll", "brier", "size")):
        return False
    raise ValueError(f"no direction known for metric {metric!r}")


@dataclass(frozen=True)
class Paired:
    """A paired comparison over shared seeds: mean of (ours − theirs), two-sided p (None: no test), seeds."""

    difference: float
    p_value: float | None
    n: int


def paired_test(ours: Mapping[int, float], theirs: Mapping[int, float]) -> Paired:
    """Paired t-test of ``ours`` against ``theirs`` (seed -> value) over the seeds both have, finite values only."""
    seeds = sorted(s for s in ours.keys() & theirs.keys() if math.isfinite(ours[s]) and math.isfinite(theirs[s]))
    a = np.array([ours[s] for s in seeds], dtype=float)
    b = np.array([theirs[s] for s in seeds], dtype=float)
    d = a - b
    if len(d) == 0:
        return Paired(math.nan, None, 0)
    if len(d) < 2:
        return Paired(float(d.mean()), None, len(d))
    tol = EQUAL_TOL * max(1.0, float(np.abs(d).max()))
    if np.ptp(d) <= tol:
        return Paired(float(d.mean()), 0.0 if abs(d.mean()) > tol else 1.0, len(d))
    return Paired(float(d.mean()), float(st.ttest_rel(a, b).pvalue), len(d))


def verdict(test: Paired, metric: str, alpha: float = ALPHA) -> str:
    """``holds`` / ``does not hold`` / ``not significant`` / ``too few seeds`` for "ours beats theirs on metric"."""
    if test.p_value is None:
        return TOO_FEW
    if test.p_value >= alpha or test.difference == 0:
        return "not significant"
    return "holds" if (test.difference > 0) == higher_is_better(metric) else "does not hold"


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values of one family (None: no test, left out of the family): the i-th smallest of
    m p-values becomes max over j <= i of min(1, (m − j + 1) · p_(j)). A claim holds at α when its adjusted p < α."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None and math.isfinite(p))
    out: list[float | None] = [None] * len(p_values)
    running, m = 0.0, len(tested)
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def bootstrap_means(d: np.ndarray, draws: int = 10000, seed: int = 0) -> np.ndarray:
    """``draws`` two-level bootstrap means of ``d`` (seeds, rows): each draw resamples the seeds, then the rows (one
    draw of rows for every seed: the test split is shared), so the spread holds the test rows' sampling noise as well
    as the seeds'."""
    n_seeds, n_rows = d.shape
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, n_seeds, size=(draws, n_seeds))
    rows = rng.integers(0, n_rows, size=(draws, n_rows))
    per_seed = np.stack([d[:, r].mean(1) for r in rows])  # (draws, seeds)
    return np.take_along_axis(per_seed, seeds, axis=1).mean(1)


def row_bootstrap(ours: np.ndarray, theirs: np.ndarray, draws: int = 10000, seed: int = 0) -> Paired:
    """Paired two-level bootstrap test of mean(ours − theirs): ``ours`` and ``theirs`` are (seeds, rows) per-row
    scores (1 for a correct row, a row's NLL, ...) of two models on the same seeds and test rows. p is twice the
    smaller share of :func:`bootstrap_means` on either side of 0 (at least 1 / draws, at most 1)."""
    a, b = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"row_bootstrap needs two (seeds, rows) arrays of one shape, got {a.shape} and {b.shape}")
    d = a - b
    if d.shape[0] < 2:
        return Paired(float(d.mean()), None, d.shape[0])
    means = bootstrap_means(d, draws, seed)
    tail = min((means <= 0).mean(), (means >= 0).mean())
    return Paired(float(d.mean()), float(min(1.0, max(2 * tail, 1 / draws))), d.shape[0])
