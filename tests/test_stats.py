"""mnp.tools.report.stats: the 95 % t-interval and the paired test of a claim, against computations of their own."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from mnp.tools.report.stats import Paired, higher_is_better, paired_test, t_interval, verdict


def hand_paired_t(a: list[float], b: list[float]) -> tuple[float, float]:
    """t statistic of the paired differences by a plain loop, two-sided p from the t distribution."""
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    t = mean / math.sqrt(var / n)
    return t, 2 * st.t.sf(abs(t), n - 1)


# ---------------------------------------------------------------------------- interval
@pytest.mark.parametrize(
    "values",
    [
        [0.95, 0.96, 0.97],
        [0.9217, 0.9083, 0.9333, 0.9167, 0.9283],
        [0.061, 0.055, 0.07, 0.064, 0.058, 0.066, 0.06, 0.052, 0.071, 0.059],
    ],
)
def test_interval_is_the_set_of_means_a_one_sample_t_test_keeps(values):
    """Brute force: the 95 % interval is every μ0 that a two-sided one-sample t-test at 0.05 does not reject."""
    lo, hi = t_interval(values)
    a = np.asarray(values)
    grid = np.linspace(a.mean() - 10 * a.std(), a.mean() + 10 * a.std(), 200_001)
    kept = grid[st.ttest_1samp(a[:, None], grid, axis=0).pvalue >= 0.05]
    step = grid[1] - grid[0]
    assert kept.min() == pytest.approx(lo, abs=step) and kept.max() == pytest.approx(hi, abs=step)
    assert (lo + hi) / 2 == pytest.approx(a.mean())


def test_interval_formula_and_degenerate_cases():
    a = [0.95, 0.96, 0.97]  # mean 0.96, sd 0.01, n 3: t_{0.975,2} = 4.302653
    lo, hi = t_interval(a)
    assert hi - 0.96 == pytest.approx(4.302652729749464 * 0.01 / math.sqrt(3))
    assert t_interval([0.5]) is None and t_interval([]) is None
    assert t_interval([0.7, 0.7, 0.7]) == pytest.approx((0.7, 0.7))


def test_interval_covers_the_true_mean_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(4000):
        lo, hi = t_interval(rng.normal(3.0, 2.0, 5))
        hits += lo <= 3.0 <= hi
    assert abs(hits / 4000 - 0.95) < 0.012  # binomial sd 0.0034


# ---------------------------------------------------------------------------- paired test
def test_paired_t_matches_a_hand_computation():
    ours = {0: 0.9217, 1: 0.9083, 2: 0.9333, 3: 0.9167, 4: 0.9283}
    theirs = {0: 0.895, 1: 0.9, 2: 0.8917, 3: 0.9, 4: 0.8883}
    res = paired_test(ours, theirs)
    t, p = hand_paired_t(list(ours.values()), list(theirs.values()))
    assert res.n == 5 and res.p_value == pytest.approx(p, rel=1e-9) and t > 0
    assert res.difference == pytest.approx(np.mean([ours[s] - theirs[s] for s in ours]))
    assert verdict(res, "test/acc") == "holds" and p < 0.05


def test_only_shared_seeds_with_finite_values_are_paired():
    ours = {0: 0.90, 1: 0.93, 2: 0.91, 3: 0.97, 4: 0.95}
    theirs = {2: 0.90, 3: 0.90, 4: 0.92, 5: 0.5, 6: 0.1, 1: math.nan}
    res = paired_test(ours, theirs)
    t, p = hand_paired_t([0.91, 0.97, 0.95], [0.90, 0.90, 0.92])
    assert res.n == 3 and res.p_value == pytest.approx(p, rel=1e-9)
    assert res.difference == pytest.approx((0.01 + 0.07 + 0.03) / 3)


def test_equal_differences_give_p_0_or_1_without_a_t_statistic():
    # the same difference on every seed, up to float noise: 0.91 − 0.90 = 0.010000000000000009, 0.94 − 0.93 =
    # 0.009999999999999898 (a t-test would see a spread of 1e-16 and give p ≈ 0 by accident, or nan)
    assert 0.91 - 0.90 != 0.94 - 0.93
    same = paired_test({0: 0.91, 1: 0.94, 2: 0.97}, {0: 0.90, 1: 0.93, 2: 0.96})
    assert same == Paired(pytest.approx(0.01), 0.0, 3)
    assert verdict(same, "test/acc") == "holds" and verdict(same, "test/ece") == "does not hold"
    zero = paired_test({0: 0.3, 1: 0.4}, {0: 0.3, 1: 0.4})
    assert zero == Paired(0.0, 1.0, 2) and verdict(zero, "test/acc") == "not significant"


def test_fewer_than_two_shared_seeds_is_too_few():
    one = paired_test({0: 0.9, 1: 0.8}, {1: 0.7, 2: 0.6})
    assert one.n == 1 and one.p_value is None and one.difference == pytest.approx(0.1)
    assert verdict(one, "test/acc") == "too few seeds"
    none = paired_test({0: 0.9}, {1: 0.7})
    assert none.n == 0 and none.p_value is None and verdict(none, "test/ece") == "too few seeds"


def test_verdict_follows_each_metrics_direction():
    rng = np.random.default_rng(1)
    base = rng.normal(0.05, 0.01, 8)
    lower = {s: v - 0.01 + rng.normal(0, 0.001) for s, v in enumerate(base)}  # ours lower on every seed
    theirs = dict(enumerate(base))
    res = paired_test(lower, theirs)
    assert res.p_value < 0.05 and res.difference < 0
    assert verdict(res, "test/ece") == "holds" and verdict(res, "test/nll") == "holds"
    assert verdict(res, "test/brier") == "holds"
    assert verdict(res, "test/acc") == "does not hold" and verdict(res, "noise/acc_mean") == "does not hold"
    assert verdict(res, "ood/svhn/auroc") == "does not hold"
    noisy = paired_test({0: 0.9, 1: 0.8, 2: 0.95}, {0: 0.85, 1: 0.9, 2: 0.9})
    assert noisy.p_value == pytest.approx(hand_paired_t([0.9, 0.8, 0.95], [0.85, 0.9, 0.9])[1])
    assert noisy.p_value > 0.05 and verdict(noisy, "test/acc") == "not significant"


def test_scipy_ttest_rel_is_the_two_sided_paired_test():
    """The verdict test is scipy's ttest_rel: the same p as the hand loop on random data."""
    rng = np.random.default_rng(2)
    for n in (2, 3, 5, 10):
        a, b = rng.random(n), rng.random(n)
        res = paired_test(dict(enumerate(a)), dict(enumerate(b)))
        assert res.p_value == pytest.approx(hand_paired_t(list(a), list(b))[1], rel=1e-9)


def test_metric_directions():
    assert all(
        higher_is_better(k)
        for k in (
            "test/acc",
            "noise/acc_mean",
            "noise/acc@0.1",
            "ood/svhn/auroc",
            "missing/acc_subsets_mean",
            "conformal/noise/coverage_mean",
            "conformal/missing/coverage@v1",
        )
    )
    assert not any(
        higher_is_better(k)
        for k in ("test/ece", "test/nll", "test/brier", "conformal/test/size", "conformal/noise/size_mean")
    )
    with pytest.raises(ValueError, match="no direction known"):
        higher_is_better("time/train_epoch_s")
