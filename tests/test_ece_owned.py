"""The owned calibration metric (issue 33): ECE, accuracy, NLL and Brier against direct computations written here,
and against scikit-learn; the defects of torchmetrics' ECE that made the project own it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torchmetrics.functional.classification import multiclass_accuracy, multiclass_calibration_error

from mnp.eval import metrics


def loop_ece(probs, labels, n_bins=15):
    """Top-label L1 ECE by a direct loop over rows and 15 equal-width bins [b/15, (b+1)/15), the last closed."""
    rows = [(max(r), int(np.argmax(r)) == y) for r, y in zip(np.asarray(probs, dtype=float).tolist(), labels.tolist())]
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        inside = [(c, ok) for c, ok in rows if lo <= c < hi or (b == n_bins - 1 and c == 1.0)]
        if inside:
            gap = sum(c for c, _ in inside) / len(inside) - sum(ok for _, ok in inside) / len(inside)
            total += len(inside) / len(rows) * abs(gap)
    return total


def random_case(seed, n=500, k=10, sharp=3.0):
    g = torch.Generator().manual_seed(seed)
    probs = (torch.randn(n, k, generator=g, dtype=torch.float64) * sharp).softmax(-1)
    return probs, torch.randint(0, k, (n,), generator=g)


def torchmetrics_ece(probs, labels):
    return multiclass_calibration_error(probs.float(), labels, num_classes=probs.shape[-1], n_bins=15, norm="l1").item()


@pytest.mark.parametrize("seed", range(4))
def test_ece_equals_a_direct_15_bin_loop(seed):
    probs, labels = random_case(seed, sharp=1.0 + 3 * seed)
    probs[:3] = torch.nn.functional.one_hot(labels[:3] + seed % 2, 10).double()  # confidence 1, right or wrong
    assert metrics.ece(probs, labels) == pytest.approx(loop_ece(probs, labels), abs=1e-12)
    assert metrics.ece(probs.float(), labels) == pytest.approx(loop_ece(probs.float(), labels), abs=1e-12)


def test_a_confidence_on_a_bin_edge_falls_into_the_bin_above_and_one_into_the_last():
    # confidence b/15 for b = 2..15 (20 classes, so it is the arg-max): bin b (b = 15: the last, bin 14)
    conf = torch.arange(2, 16, dtype=torch.float64) / 15
    probs = torch.cat([conf[:, None], ((1 - conf) / 19)[:, None].expand(-1, 19)], 1)
    labels = torch.arange(14) % 2
    rel = metrics.reliability(probs, labels)
    assert rel["count"].tolist() == [0, 0] + [1] * 12 + [2]
    assert rel["ece"] == pytest.approx(loop_ece(probs, labels), abs=1e-12)


def test_confidence_one_is_in_the_15th_bin_where_torchmetrics_opens_a_16th():
    # 10 rows of confidence 0.95, all right (gap −0.05 each), and one wrong row of confidence 1
    probs = torch.tensor([[0.95, 0.05]] * 10 + [[1.0, 0.0]], dtype=torch.float64)
    labels = torch.tensor([0] * 10 + [1])
    rel = metrics.reliability(probs, labels)
    assert len(rel["count"]) == 15 and rel["count"][14] == 11
    assert rel["ece"] == pytest.approx(abs(10 * -0.05 + 1) / 11, abs=1e-12) == pytest.approx(loop_ece(probs, labels))
    assert torchmetrics_ece(probs, labels) == pytest.approx((10 * 0.05 + 1) / 11, abs=1e-6)  # the 16th bin


def overconfident_case():
    """Confidence 0.9 on 10 classes, right for 50 % of the rows: ECE 0.4."""
    probs = torch.full((200, 10), 0.1 / 9, dtype=torch.float64)
    probs[:, 0] = 0.9
    return probs, (torch.arange(200) % 2).long()


def test_an_entry_out_of_range_within_the_tolerance_is_clipped_where_torchmetrics_softmaxes_everything():
    probs, labels = overconfident_case()
    probs = probs.float()  # the test loop's dtype; torchmetrics got the same
    owned = metrics.ece(probs, labels)
    assert owned == pytest.approx(0.4, abs=1e-7) and torchmetrics_ece(probs, labels) == pytest.approx(owned, abs=1e-6)
    probs[0, 0] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))  # 1 + 1.2e-7, float rounding
    # row 0 (right) moves to the last bin: (199 · |0.9 − 99/199|) / 200
    assert metrics.ece(probs, labels) == pytest.approx(loop_ece(probs.clamp(0, 1), labels), abs=1e-12)
    assert metrics.ece(probs, labels) == pytest.approx((199 * 0.9 - 99) / 200, abs=1e-7)
    assert abs(torchmetrics_ece(probs, labels) - 0.4) > 0.1  # it took the probabilities for logits, softmaxed
    probs[1, 3] = -1e-7
    assert metrics.ece(probs, labels) == pytest.approx(loop_ece(probs.clamp(0, 1), labels), abs=1e-12)


@pytest.mark.parametrize("entry", [1 + 2e-6, -2e-6, 3.5])
def test_an_entry_beyond_the_tolerance_is_refused_with_the_range_found(entry):
    probs, labels = overconfident_case()
    probs[5, 2] = entry
    lo, hi = min(entry, 0.1 / 9), max(entry, 0.9)
    with pytest.raises(
        ValueError,
        match=rf"^probabilities must lie in \[0, 1\] \(to within 1e-06\); got min "
        rf"{lo:.9g}, max {hi:.9g}$",
    ):
        metrics.ece(probs, labels)
    with pytest.raises(ValueError, match="probabilities must lie in"):
        metrics.adaptive_ece(probs, labels)


def test_the_figure_title_and_the_wandb_table_use_the_bins_of_the_reported_ece():
    from mnp.eval.figures import reliability_figure
    from mnp.eval.wandb_tables import reliability_table

    # a mixture: a calibrated bulk and wrong rows at confidence 1 and on the edge 14/15
    probs, labels = random_case(7, n=300)
    probs[:20] = torch.nn.functional.one_hot((labels[:20] + 1) % 10, 10).double()
    probs[20:30] = 1 / 135
    probs[20:30, 3] = 14 / 15
    probs, labels = probs.float().numpy(), labels.numpy()
    reported = metrics.ece(torch.as_tensor(probs), torch.as_tensor(labels))
    assert reported == pytest.approx(loop_ece(probs, labels), abs=1e-12)
    fig = reliability_figure(probs, labels, "mix")
    assert fig.axes[0].get_title() == f"mix\nECE = {reported:.3f}"
    rows = reliability_table(probs, labels).rows
    assert len(rows) == 15 and sum(r[5] for r in rows) == len(labels)
    from_table = sum(r[5] * abs(r[4] - r[3]) for r in rows if r[5]) / len(labels)
    assert from_table == pytest.approx(reported, abs=1e-12)


def test_a_nonfinite_row_is_an_error_in_accuracy_and_makes_the_ece_nan_as_nll_and_brier():
    probs = torch.tensor([[0.9, 0.1], [0.2, 0.8], [float("nan")] * 2, [float("inf"), 0.0]])
    labels = torch.tensor([0, 1, 0, 0])  # the NaN row's arg-max would be class 0, its label
    assert metrics.correct(probs, labels).tolist() == [True, True, False, False]
    assert metrics.accuracy(probs, labels) == 0.5
    rel = metrics.reliability(probs, labels)
    assert rel["nonfinite"] == 2 and rel["count"].sum() == 2 and math.isnan(rel["ece"])
    assert all(math.isnan(f(probs, labels)) for f in (metrics.ece, metrics.nll, metrics.brier))


def test_the_figure_of_a_run_with_nonfinite_rows_says_so_beside_its_nan_ece():
    from mnp.eval.figures import reliability_figure

    probs = np.array([[0.9, 0.1], [0.2, 0.8], [np.nan, np.nan]], dtype=np.float32)
    fig = reliability_figure(probs, np.array([0, 1, 0]), "t")
    assert fig.axes[0].get_title() == "t\nECE = nan (1 row not finite)"
    assert [p.get_height() for p in fig.axes[1].patches] == [1, 1]


@pytest.mark.parametrize("seed", range(3))
def test_accuracy_equals_torchmetrics_bit_for_bit(seed):
    probs, labels = random_case(seed, n=997 + seed, k=3 + seed)
    for p in (probs, probs.float()):
        assert (
            metrics.accuracy(p, labels)
            == multiclass_accuracy(p, labels, num_classes=p.shape[-1], average="micro").item()
        )


def test_nll_is_capped_at_minus_log_1e_12_per_row():
    probs = torch.tensor([[1.0, 0.0], [0.3, 0.7], [1 - 1e-13, 1e-13]], dtype=torch.float64)
    labels = torch.tensor([1, 1, 1])
    cap = -math.log(1e-12)
    assert cap == pytest.approx(27.631, abs=1e-3)
    expected = (cap + -math.log(0.7) + cap) / 3
    assert metrics.nll(probs, labels) == pytest.approx(expected, rel=1e-12)


def test_brier_sums_over_classes_twice_scikit_learns_for_two_classes():
    from sklearn.metrics import brier_score_loss

    probs, labels = random_case(3, n=400, k=2)
    assert metrics.brier(probs, labels) == pytest.approx(
        2 * brier_score_loss(labels.numpy(), probs[:, 1].numpy()), rel=1e-12
    )
    probs, labels = random_case(4, n=50, k=5)
    direct = sum(sum((p - (j == y)) ** 2 for j, p in enumerate(row)) for row, y in zip(probs.tolist(), labels.tolist()))
    assert metrics.brier(probs, labels) == pytest.approx(direct / 50, rel=1e-12)
