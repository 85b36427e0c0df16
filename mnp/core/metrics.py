"""Classification and uncertainty metrics (docs/method.md §5).

All functions take *probabilities* (never logits) and return Python floats or tensors on the
input's device. Accuracy and ECE use torchmetrics; AUROC is computed here on the full set of
scores at once because torchmetrics' binary AUROC sigmoid-squashes scores outside [0, 1] batch by
batch, which saturates large uncertainty scores (entropies, variances) into ties.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics.functional.classification import multiclass_accuracy, multiclass_calibration_error

EPS = 1e-12


def nonfinite_rows(probs: Tensor) -> int:
    """How many rows of ``probs`` (N, K) hold a NaN or inf: a numerical failure, not a prediction."""
    return int((~torch.isfinite(probs)).any(-1).sum())


def accuracy(probs: Tensor, labels: Tensor) -> float:
    """Micro accuracy of the arg-max prediction; ``probs`` is (N, K). A row that is not finite counts as an error
    (the arg-max of NaN is class 0, which would count as right for every row of that class)."""
    finite = torch.isfinite(probs).all(-1, keepdim=True)
    if not finite.all():
        wrong = torch.nn.functional.one_hot((labels + 1) % probs.shape[-1], probs.shape[-1]).to(probs.dtype)
        probs = torch.where(finite, probs, wrong)
    return multiclass_accuracy(probs, labels, num_classes=probs.shape[-1], average="micro").item()


def ece(probs: Tensor, labels: Tensor, n_bins: int = 15) -> float:
    """Top-label L1 expected calibration error with equal-width bins; NaN when a row is not finite, as
    NLL and Brier are (torchmetrics would bin a NaN confidence and return a number)."""
    if not torch.isfinite(probs).all():
        return float("nan")
    return multiclass_calibration_error(
        probs.float(), labels, num_classes=probs.shape[-1], n_bins=n_bins, norm="l1"
    ).item()


def nll(probs: Tensor, labels: Tensor) -> float:
    """Mean negative log-likelihood of the true class."""
    p = probs.gather(-1, labels[:, None]).squeeze(-1)
    return (-p.clamp_min(EPS).log()).mean().item()


def brier(probs: Tensor, labels: Tensor) -> float:
    """Multiclass Brier score: squared distance to the one-hot label, summed over classes."""
    onehot = torch.nn.functional.one_hot(labels, probs.shape[-1]).to(probs.dtype)
    return (probs - onehot).pow(2).sum(-1).mean().item()


def auroc(scores: Tensor, positive: Tensor) -> float:
    """Area under the ROC curve with ``positive`` (e.g. OOD) as the positive class.

    Mann-Whitney U with average ranks for ties: exact and O(n log n), equal to the fraction of
    (positive, negative) pairs ordered correctly, ties counting one half.
    """
    scores = scores.double().flatten()
    positive = positive.bool().flatten()
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"AUROC needs both classes; got {n_pos} positives and {n_neg} negatives")
    order = scores.argsort()
    sorted_scores = scores[order]
    ranks = torch.empty_like(scores)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=scores.dtype, device=scores.device)
    # average ranks inside groups of tied scores
    _, inverse, counts = torch.unique_consecutive(sorted_scores, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).to(scores.dtype)
    avg = ends - (counts.to(scores.dtype) - 1) / 2
    ranks[order] = avg[inverse]
    u = ranks[positive].sum() - n_pos * (n_pos + 1) / 2
    return (u / (n_pos * n_neg)).item()


def entropy(probs: Tensor) -> Tensor:
    """Shannon entropy over the last axis."""
    return -(probs * probs.clamp_min(EPS).log()).sum(-1)


def expected_entropy(probs: Tensor) -> Tensor:
    """Mean over the sample axis (0) of each sample's entropy: (S, B, K) -> (B,)."""
    return entropy(probs).mean(0)


def classification_metrics(probs: Tensor, labels: Tensor, n_bins: int = 15) -> dict[str, float]:
    """acc, ece, nll and brier of mean predictive probabilities (N, K)."""
    return {
        "acc": accuracy(probs, labels),
        "ece": ece(probs, labels, n_bins),
        "nll": nll(probs, labels),
        "brier": brier(probs, labels),
    }


def reliability(probs: Tensor, labels: Tensor, n_bins: int = 15) -> dict[str, Tensor]:
    """Per-bin confidence, accuracy and count for a reliability diagram."""
    conf, pred = probs.max(-1)
    correct = (pred == labels).double()
    idx = (conf * n_bins).long().clamp(max=n_bins - 1)
    count = torch.bincount(idx, minlength=n_bins).double()
    safe = count.clamp_min(1)
    return {
        "confidence": torch.bincount(idx, conf.double(), minlength=n_bins) / safe,
        "accuracy": torch.bincount(idx, correct, minlength=n_bins) / safe,
        "count": count,
    }
