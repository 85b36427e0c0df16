"""The conformal study's part of the report (issue 47, ``conf/experiment/conformal.yaml``, docs/method.md §5.7).

* :func:`with_conformal_means`: a run whose metrics.json has per-σ or per-view coverage and size but not their
  ``_mean`` (``conformal/noise/coverage_mean``, ``conformal/missing/coverage_mean``, ...) gets the mean of them, so
  every run has the keys the claims test (:data:`mnp.tools.report.report_records.CLAIM_METRICS`).
* :func:`conformal_tables`: per dataset, each model's coverage and mean set size on the clean test rows, averaged
  over σ, and averaged over the missing views; none where no run has sets (the paper's experiments).
* :func:`coverage_floor`: the finite-sample tolerance below 1 − α under which a clean coverage is a miss.
"""

from __future__ import annotations

import re

from scipy.stats import betabinom

from mnp.eval.conformal import quantile_rank
from mnp.tools.report.report_runs import DATASET_ORDER, dataset_label, order
from mnp.tools.report.report_tables import Metric, Table, make_table

PER_LEVEL = re.compile(r"^conformal/(noise|missing)/(coverage|size)@")
COVERAGE = Metric("conformal/test/coverage", True, 100.0, 2)
SIZE = Metric("conformal/test/size", False, 1.0, 2)
NOISY_COVERAGE = Metric("conformal/noise/coverage_mean", True, 100.0, 2)
NOISY_SIZE = Metric("conformal/noise/size_mean", False, 1.0, 2)
MISSING_COVERAGE = Metric("conformal/missing/coverage_mean", True, 100.0, 2)
MISSING_SIZE = Metric("conformal/missing/size_mean", False, 1.0, 2)
COLUMNS = [
    ("coverage % ↑", COVERAGE),
    ("size ↓", SIZE),
    ("noisy coverage % ↑", NOISY_COVERAGE),
    ("noisy size ↓", NOISY_SIZE),
    ("view missing: coverage % ↑", MISSING_COVERAGE),
    ("view missing: size ↓", MISSING_SIZE),
]
FLOOR_LEVEL = 0.01  # a run whose sets are valid falls below coverage_floor this often


def with_conformal_means(records: dict) -> dict:
    """``records`` (runs.csv rows) with each missing ``conformal/<noise|missing>/<coverage|size>_mean`` set to the
    mean of the run's per-σ or per-view values."""
    for metrics in records.values():
        levels: dict[str, list[float]] = {}
        for k, v in metrics.items():
            if m := PER_LEVEL.match(k):
                levels.setdefault(f"conformal/{m.group(1)}/{m.group(2)}_mean", []).append(v)
        for k, vs in levels.items():
            metrics.setdefault(k, sum(vs) / len(vs))
    return records


def coverage_floor(n_cal: int, n_test: int, alpha: float, level: float = FLOOR_LEVEL) -> float:
    """The ``level`` quantile of a valid run's clean test coverage: given its ``n_cal`` validation rows the coverage
    is Beta(r, n_cal + 1 − r), r = ⌈(n_cal + 1)(1 − α)⌉, and ``n_test`` rows count it, so the share of rows covered
    is Beta-binomial (Angelopoulos and Bates 2021, "A gentle introduction to conformal prediction": checking
    coverage)."""
    r = quantile_rank(n_cal, alpha)
    return float(betabinom.ppf(level, n_test, r, n_cal + 1 - r)) / n_test


def conformal_tables(agg: dict, experiment: str) -> list[Table]:
    """Per dataset with sets: every model's :data:`COLUMNS` (mean [95 % t-interval] over seeds)."""
    datasets = order({d for (e, _, _, d, k) in agg if e == experiment and k == COVERAGE.key}, DATASET_ORDER)
    title = (
        "{}: conformal sets (eval.conformal, validation rows) on the clean test rows, averaged over σ, and averaged "
        "over the missing views"
    )
    tables = [
        make_table(
            "", title.format(dataset_label(d)), f"conformal-{d}", agg, experiment, [(h, d, m) for h, m in COLUMNS]
        )
        for d in datasets
    ]
    return [t for t in tables if t is not None]
