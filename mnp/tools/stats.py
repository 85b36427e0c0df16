"""Statistics over seeds for :mod:`mnp.tools.report`: the 95 % t-interval of a mean and the paired test of a claim.

* Interval: mean ± t_{0.975, n−1} · s / √n, s the sample standard deviation (ddof = 1); none for n < 2.
* Claim "MNP beats X on metric M": a two-sided paired t-test (:func:`scipy.stats.ttest_rel`) over the seeds
  both cells have. When every difference is the same the test is undefined: p = 0 if that difference is
  nonzero, 1 if it is zero. Fewer than 2 shared seeds: no test. Verdict at α = 0.05: ``holds`` (the
  difference favours MNP), ``does not hold`` (it favours X), ``not significant``, ``too few seeds``.
  No correction for testing many claims at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

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
    """Direction of a metrics.json key: accuracies and AUROC up, ECE, NLL and Brier down."""
    leaf = metric.split("/")[-1]
    if leaf.startswith("acc") or leaf == "auroc":
        return True
    if leaf.startswith(("ece", "nll", "brier")):
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
