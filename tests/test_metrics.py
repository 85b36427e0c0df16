"""Metrics against hand-computed values and brute force."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mnp.eval import metrics
from mnp.eval.eval_protocol import EvalProtocol


def test_ece_hand_computed():
    # 4 samples, 2 classes; top-label confidences 0.9, 0.9, 0.6, 0.7 (bins of width 1/15).
    probs = torch.tensor([[0.9, 0.1], [0.1, 0.9], [0.6, 0.4], [0.3, 0.7]])
    labels = torch.tensor([0, 0, 0, 0])
    # bin [0.8667, 0.9333): conf 0.9, 0.9 -> acc 1/2 -> gap 0.4, weight 2/4
    # bin [0.6, 0.6667): conf 0.6 -> acc 1 -> gap 0.4, weight 1/4
    # bin [0.6667, 0.7333): conf 0.7 -> acc 0 -> gap 0.7, weight 1/4
    expected = 0.5 * 0.4 + 0.25 * 0.4 + 0.25 * 0.7
    assert metrics.ece(probs, labels) == pytest.approx(expected, abs=1e-6)


def test_accuracy_is_micro():
    probs = torch.tensor([[0.9, 0.1, 0.0], [0.8, 0.1, 0.1], [0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    labels = torch.tensor([0, 0, 0, 1])  # class 1 never predicted: macro would be (1 + 0) / 2
    assert metrics.accuracy(probs, labels) == pytest.approx(0.75)


def test_nll_and_brier_hand_computed():
    probs = torch.tensor([[0.5, 0.5], [0.8, 0.2]])
    labels = torch.tensor([1, 0])
    assert metrics.nll(probs, labels) == pytest.approx((-np.log(0.5) - np.log(0.8)) / 2, rel=1e-6)
    assert metrics.brier(probs, labels) == pytest.approx(((0.25 + 0.25) + (0.04 + 0.04)) / 2, rel=1e-6)


def brute_force_auroc(scores, pos):
    p, n = scores[pos == 1], scores[pos == 0]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(p, n))
    return wins / (len(p) * len(n))


@pytest.mark.parametrize("seed", range(5))
def test_auroc_equals_pairwise_count(seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 6, 60).astype(float)  # many ties
    pos = rng.integers(0, 2, 60)
    pos[:2] = [0, 1]
    assert metrics.auroc(torch.tensor(scores), torch.tensor(pos)) == pytest.approx(brute_force_auroc(scores, pos))


@pytest.mark.parametrize("seed", range(3))
def test_auroc_matches_scikit_learn(seed):
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 2, 500)
    scores = rng.normal(size=500) * 40 + pos * 25  # unbounded scores, as entropies and variances are
    assert metrics.auroc(torch.tensor(scores), torch.tensor(pos)) == pytest.approx(roc_auc_score(pos, scores), abs=1e-9)


def test_auroc_large_scores_not_squashed():
    # scores far outside [0, 1]: a sigmoid would saturate them into ties (AUROC -> 0.5)
    scores = torch.tensor([100.0, 200.0, 300.0, 400.0])
    assert metrics.auroc(scores, torch.tensor([0, 0, 1, 1])) == 1.0


def test_auroc_needs_both_classes():
    with pytest.raises(ValueError, match="both classes"):
        metrics.auroc(torch.rand(5), torch.zeros(5))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-500, 500), min_size=4, max_size=40), st.integers(0, 2**31 - 1))
def test_auroc_invariant_to_monotone_transform(values, seed):
    scores = torch.tensor(values, dtype=torch.float64) / 10  # distinct values stay distinct under exp
    pos = torch.tensor(np.random.default_rng(seed).integers(0, 2, len(values)))
    pos[0], pos[1] = 0, 1
    a = metrics.auroc(scores, pos)
    assert metrics.auroc(torch.exp(scores / 10), pos) == pytest.approx(a)
    assert metrics.auroc(3 * scores + 7, pos) == pytest.approx(a)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 50), st.integers(2, 6), st.integers(0, 2**31 - 1))
def test_ece_in_unit_interval(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    probs = torch.randn(n, k, generator=g).mul(3).softmax(-1)
    labels = torch.randint(0, k, (n,), generator=g)
    assert 0.0 <= metrics.ece(probs, labels) <= 1.0


def test_expected_entropy_vs_entropy_of_mean():
    # two confident but disagreeing samples: expected entropy ~0, entropy of the mean = log 2
    probs = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
    assert metrics.expected_entropy(probs).item() == pytest.approx(0.0, abs=1e-6)
    assert metrics.entropy(probs.mean(0)).item() == pytest.approx(np.log(2), rel=1e-6)


def test_reliability_bins():
    probs = torch.tensor([[0.95, 0.05], [0.95, 0.05], [0.55, 0.45]])
    labels = torch.tensor([0, 1, 0])
    r = metrics.reliability(probs, labels, n_bins=10)
    assert r["count"][9] == 2 and r["count"][5] == 1
    assert r["accuracy"][9] == pytest.approx(0.5) and r["confidence"][9] == pytest.approx(0.95)


def test_non_finite_test_probabilities_are_counted_and_reported(caplog):
    """A model whose probabilities turn NaN on some test rows (MGP did on a GPU) gets a warning and the
    count of those rows in its results, instead of a silently wrong ECE."""
    import logging

    from baselines.mlp import MLP

    model = MLP(num_classes=3, view_dims=[4, 5])
    probs = torch.full((6, 3), 1 / 3)
    probs[[1, 4], 0] = float("nan")
    model.configure_evaluation(EvalProtocol(noise=False, missing=False))
    model.on_test_epoch_start()  # the test loop's empty state; then one batch's clean predictions
    model._clean = {"probs": [probs], "labels": [torch.zeros(6, dtype=torch.long)], "unc": [torch.zeros(6)]}
    model.log = lambda *a, **k: None
    with caplog.at_level(logging.WARNING, logger="mnp.framework.routine"):
        model.on_test_epoch_end()
    assert model.test_results["test/nonfinite_rows"] == 2
    assert "2 of 6 test rows have non-finite probabilities (MLP)" in caplog.text
    assert all(np.isnan(model.test_results[f"test/{k}"]) for k in ("ece", "nll", "brier"))


def test_ece_of_probabilities_with_a_nan_row_is_nan_not_a_number_from_the_other_rows():
    probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [float("nan"), float("nan")]])
    labels = torch.tensor([0, 0, 1])
    assert metrics.ece(probs[:2], labels[:2]) == pytest.approx(0.15)
    assert np.isnan(metrics.ece(probs, labels))


# ---------------------------------------------------------------------------- selective classification, OOD
def loop_aurc(conf, correct):
    """The risk-coverage area by a direct loop: error rate of the k most confident rows, k = 1..N, averaged."""
    order = sorted(range(len(conf)), key=lambda i: -conf[i])
    return np.mean([np.mean([not correct[i] for i in order[:k]]) for k in range(1, len(conf) + 1)])


def random_probs(rng, n, k=4, ties=False):
    logits = rng.normal(size=(n, k)) * 2
    if ties:
        logits = np.round(logits)  # many rows share a max probability
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return torch.tensor(p), torch.tensor(rng.integers(0, k, n))


@pytest.mark.parametrize("seed", range(3))
def test_aurc_and_coverage_accuracy_match_a_direct_loop(seed):
    rng = np.random.default_rng(seed)
    probs, labels = random_probs(rng, 200)
    conf, correct = probs.max(1).values.numpy(), (probs.argmax(1) == labels).numpy()
    assert metrics.aurc(probs, labels) == pytest.approx(loop_aurc(conf, correct), abs=1e-12)
    top = np.argsort(-conf)[:180]  # 90 % of 200 rows
    assert metrics.accuracy_at_coverage(probs, labels, 0.9) == pytest.approx(correct[top].mean(), abs=1e-12)
    assert metrics.accuracy_at_coverage(probs, labels, 1.0) == pytest.approx(correct.mean(), abs=1e-12)


def test_aurc_of_tied_confidences_is_the_mean_over_their_orders():
    conf = np.array([0.9, 0.9, 0.9, 0.5, 0.5, 0.2])
    correct = np.array([1, 0, 1, 0, 1, 0], dtype=bool)
    orders = [p for p in itertools.permutations(range(6)) if all(conf[p[i]] >= conf[p[i + 1]] for i in range(5))]
    expected = np.mean([loop_aurc(-np.arange(6.0), correct[list(p)]) for p in orders])  # each order, no ties left
    got = metrics.selective_risks(torch.tensor(conf), torch.tensor(correct)).mean().item()
    assert got == pytest.approx(expected, abs=1e-12)


def test_aurc_of_a_perfect_ranking_and_of_an_inverted_one():
    probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.55, 0.45]])
    right_first, wrong_first = torch.tensor([0, 0, 1, 1]), torch.tensor([1, 1, 0, 0])
    assert metrics.aurc(probs, right_first) == pytest.approx((0 + 0 + 1 / 3 + 2 / 4) / 4)
    assert metrics.aurc(probs, wrong_first) == pytest.approx((1 + 1 + 2 / 3 + 2 / 4) / 4)


@pytest.mark.parametrize("seed", range(3))
def test_adaptive_ece_matches_a_direct_loop_over_equal_mass_bins(seed):
    rng = np.random.default_rng(seed)
    probs, labels = random_probs(rng, 301)
    conf, correct = probs.max(1).values.numpy(), (probs.argmax(1) == labels).numpy()
    order = np.argsort(conf, kind="stable")
    expected = sum(len(b) / 301 * abs(conf[b].mean() - correct[b].mean()) for b in np.array_split(order, 15))
    assert metrics.adaptive_ece(probs, labels, 15) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_aupr_and_fpr95_match_scikit_learn(seed, ties):
    from sklearn.metrics import average_precision_score, roc_curve

    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 2, 400)
    scores = rng.normal(size=400) * 3 + pos * 2
    if ties:
        scores = np.round(scores)
    assert metrics.aupr(torch.tensor(scores), torch.tensor(pos)) == pytest.approx(
        average_precision_score(pos, scores), abs=1e-12
    )
    fpr, tpr, _ = roc_curve(pos, scores, drop_intermediate=False)
    assert metrics.fpr_at_tpr(torch.tensor(scores), torch.tensor(pos)) == pytest.approx(
        fpr[np.argmax(tpr >= 0.95)], abs=1e-12
    )


def test_ood_scores_name_each_score_and_energy_only_with_logits():
    logits = torch.tensor([[2.0, 0.0], [0.1, 0.0]])
    probs, unc = logits.softmax(-1), torch.tensor([0.3, 0.7])
    assert set(metrics.ood_scores(probs, unc)) == {"", "msp", "entropy"}
    scores = metrics.ood_scores(probs, unc, logits)
    assert scores["energy"].tolist() == pytest.approx([-np.log(np.exp(2) + 1), -np.log(np.exp(0.1) + 1)])
    assert scores["msp"].tolist() == pytest.approx((1 - probs.max(1).values).tolist())


def test_a_run_writes_the_selective_and_ood_metrics_that_a_reference_recomputes(tmp_path, one_thread):
    """metrics.json of a run with held-out classes: AURC, accuracy at 90 % coverage, adaptive ECE, and AUPR and
    FPR95 of each OOD score, recomputed from predictions.npz with scikit-learn and direct loops."""
    from cfg_utils import compose_train
    from sklearn.datasets import load_digits
    from sklearn.metrics import average_precision_score, roc_curve

    from mnp.cli.pipeline import train

    x, y = load_digits(return_X_y=True)
    np.savez(tmp_path / "d.npz", x1=x[:, :32], x2=x[:, 32:], y=y)
    res = train(
        compose_train(
            tmp_path / "run",
            [
                "model=mlp",
                "dataset=custom",
                f"dataset.path={tmp_path / 'd.npz'}",
                "dataset.ood_classes=[0,1]",
                "trainer.max_epochs=2",
                "eval.noise=false",
                "eval.missing=false",
            ],
        )
    )
    z = np.load(tmp_path / "run" / "predictions.npz")
    probs, labels, unc = z["test/probs"], z["test/labels"], z["test/uncertainty"]
    conf, correct = probs.max(1), probs.argmax(1) == labels
    assert res["test/aurc"] == pytest.approx(loop_aurc(conf, correct), abs=1e-9)
    assert res["test/aurc_unc"] == pytest.approx(loop_aurc(-unc, correct), abs=1e-9)
    top = np.argsort(-conf, kind="stable")[: int(np.ceil(0.9 * len(conf)))]
    assert res["test/acc@cov90"] == pytest.approx(correct[top].mean(), abs=1e-9)
    assert 0 <= res["test/ece_adaptive"] < 1
    is_ood, p = z["ood/heldout/is_ood"], z["ood/heldout/probs"].astype(np.float64)
    for score, values in {"": z["ood/heldout/uncertainty"], "@msp": 1 - p.max(1)}.items():
        assert res[f"ood/heldout/aupr{score}"] == pytest.approx(average_precision_score(is_ood, values), abs=1e-6)
        fpr, tpr, _ = roc_curve(is_ood, values, drop_intermediate=False)
        assert res[f"ood/heldout/fpr95{score}"] == pytest.approx(fpr[np.argmax(tpr >= 0.95)], abs=1e-6)
    assert {"ood/heldout/auroc@entropy", "ood/heldout/aupr@energy", "ood/heldout/fpr95@energy"} <= set(res)
