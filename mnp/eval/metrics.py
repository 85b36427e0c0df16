"""Classification and uncertainty metrics (docs/method.md §5).

All functions but :func:`energy` take *probabilities* (never logits) and return Python floats or tensors
on the input's device. Selective classification (AURC, accuracy at a coverage) and OOD detection (AUROC, AUPR,
FPR at 95 % TPR) handle tied scores as scikit-learn does, or by their expectation over the tied rows' orders.
Accuracy, ECE and the reliability bins are computed here, not by torchmetrics (issue 33), whose
``multiclass_calibration_error`` (1.9) softmaxes the whole matrix when one entry lies outside [0, 1], even by
one float32 ulp (1 + 1.2e-7 turned an ECE of 0.40 into 0.29, tests/test_ece_owned.py), puts a confidence of
exactly 1 into a 16th bin (its issue 3510; a wrong row there: 0.045 became 0.136), bins a NaN confidence and
returns a number (0.745 for a run with 5 NaN rows, docs/results.md), and was not the binning of the
reliability figure, whose title then disagreed with ``test/ece``. AUROC is
computed here on the full set of scores at once because torchmetrics' binary AUROC sigmoid-squashes scores
outside [0, 1] batch by batch, which saturates large uncertainty scores (entropies, variances) into ties.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import Tensor

log = logging.getLogger(__name__)
EPS = 1e-12  # the NLL's floor on the true class's probability: a row's NLL is at most -log(1e-12) = 27.63
PROB_TOL = 1e-6  # probabilities this far outside [0, 1] (float rounding) are clipped into it; further: an error


def nonfinite_rows(probs: Tensor) -> int:
    """How many rows of ``probs`` (N, K) hold a NaN or inf: a numerical failure, not a prediction."""
    return int((~torch.isfinite(probs)).any(-1).sum())


def count_nonfinite(results: dict, key: str, probs: Tensor, rows: str, model: str) -> None:
    """``results[key]``, the rows of a pass whose probabilities are not finite (a numerical failure), with a
    warning; none: no key."""
    if bad := nonfinite_rows(probs):
        results[key] = bad
        log.warning(
            "%d of %d %s have non-finite probabilities (%s): they count as errors in the accuracy, and "
            "ECE, NLL and Brier are not meaningful",
            bad,
            len(probs),
            rows,
            model,
        )


def correct(probs: Tensor, labels: Tensor) -> Tensor:
    """(N,) bool: the arg-max of the row is its label and the row is finite. A row holding a NaN or inf is a
    numerical failure and counts as an error (its arg-max would be class 0 or the NaN's position)."""
    return (probs.argmax(-1) == labels) & torch.isfinite(probs).all(-1)


def accuracy(probs: Tensor, labels: Tensor) -> float:
    """Micro accuracy of the arg-max prediction, ``probs`` (N, K); a row that is not finite is an error. The
    float32 mean equals torchmetrics' ``multiclass_accuracy`` bit for bit, so committed accuracies keep their
    digits (tests/test_ece_owned.py)."""
    return correct(probs, labels).float().mean().item()


def checked_probabilities(probs: Tensor) -> Tensor:
    """``probs`` clipped into [0, 1] when no finite entry lies more than PROB_TOL outside it (float rounding);
    further out, a ValueError naming the range found (logits or a bug, not probabilities). NaN and inf pass."""
    values = probs[torch.isfinite(probs)]
    if values.numel() and (values.min() < -PROB_TOL or values.max() > 1 + PROB_TOL):
        raise ValueError(
            f"probabilities must lie in [0, 1] (to within {PROB_TOL:g}); got min {values.min().item():.9g}, "
            f"max {values.max().item():.9g}"
        )
    return torch.where(torch.isfinite(probs), probs.clamp(0.0, 1.0), probs)


def reliability(probs: Tensor, labels: Tensor, n_bins: int = 15) -> dict:
    """The one binning of the ECE, the reliability figure and the wandb table (docs/method.md §5).

    The top-label confidence c (float64) falls into one of ``n_bins`` equal-width bins with edges e_b = b / n_bins:
    bin b is [e_b, e_{b+1}) and the last, [e_{n-1}, 1], is closed on the right (a confidence of 1 is in it).
    Returns per bin the mean ``confidence``, ``accuracy`` (0 where the bin is empty) and ``count``; ``nonfinite``,
    the rows holding a NaN or inf, left out of the bins; and ``ece`` = Σ_b |Σ_{i∈b} (c_i − correct_i)| / N, the
    top-label L1 ECE, NaN when a row is not finite (as NLL and Brier are) or there is no row.
    """
    probs = checked_probabilities(probs).double()
    finite = torch.isfinite(probs).all(-1)
    conf = probs[finite].max(-1).values
    hit = correct(probs, labels)[finite].double()
    edges = torch.arange(1, n_bins, dtype=torch.float64, device=probs.device) / n_bins  # the inner edges
    idx = torch.bucketize(conf, edges, right=True)
    count = torch.bincount(idx, minlength=n_bins).double()
    conf_sum, hit_sum = torch.bincount(idx, conf, minlength=n_bins), torch.bincount(idx, hit, minlength=n_bins)
    nonfinite = int((~finite).sum())
    ece = (conf_sum - hit_sum).abs().sum().item() / len(probs) if len(probs) and not nonfinite else float("nan")
    return {
        "confidence": conf_sum / count.clamp_min(1),
        "accuracy": hit_sum / count.clamp_min(1),
        "count": count,
        "nonfinite": nonfinite,
        "ece": ece,
    }


def ece(probs: Tensor, labels: Tensor, n_bins: int = 15) -> float:
    """Top-label L1 expected calibration error over :func:`reliability`'s equal-width bins (its docstring has
    the bin edges); NaN when a row is not finite; a ValueError for entries outside [0, 1] beyond PROB_TOL."""
    return reliability(probs, labels, n_bins)["ece"]


def nll(probs: Tensor, labels: Tensor) -> float:
    """Mean negative log-likelihood of the true class, the probability floored at EPS: each row's NLL is at
    most -log(1e-12) = 27.63 (a confidently wrong row would otherwise be infinite)."""
    p = probs.gather(-1, labels[:, None]).squeeze(-1)
    return (-p.clamp_min(EPS).log()).mean().item()


def brier(probs: Tensor, labels: Tensor) -> float:
    """Multiclass Brier score: squared distance to the one-hot label, summed over the K classes (range [0, 2]);
    for two classes, twice scikit-learn's ``brier_score_loss`` of the positive class's probability."""
    onehot = torch.nn.functional.one_hot(labels, probs.shape[-1]).to(probs.dtype)
    return (probs - onehot).pow(2).sum(-1).mean().item()


# not sklearn's roc_auc_score (issue 33): it differs by 1 ulp on a third of inputs, and results/ keeps 16 digits
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


def debiased_ce(probs: Tensor, labels: Tensor, n_bins: int = 15) -> float:
    """Top-label debiased L2 calibration error (Kumar, Liang & Ma, NeurIPS 2019), as their ``calibration`` package
    computes it: equal-mass bins (the sorted confidences cut by ``array_split``, the cuts at the midpoints between
    neighbours, a row at a cut in the lower bin); in bin b of n_b rows the squared gap (mean confidence − accuracy)²
    less its sampling bias a_b(1 − a_b)/(n_b − 1) (0 for a bin of one row); the root of max(0, Σ_b n_b/n · that).
    Plain binned ECE on 120 rows is mostly the estimator's bias (``ece_floor``); this one is unbiased in the square.
    NaN when a row is not finite."""
    probs = checked_probabilities(probs)
    if not torch.isfinite(probs).all() or not len(probs):
        return float("nan")
    conf, pred = probs.double().max(-1)
    conf, hit = conf.cpu().numpy(), (pred == labels).double().cpu().numpy()
    chunks = np.array_split(np.sort(conf), min(int(n_bins), len(conf)))
    cuts = np.unique([(a[-1] + b[0]) / 2 for a, b in zip(chunks[:-1], chunks[1:])] + [1.0])
    idx = np.searchsorted(cuts, conf)
    total = 0.0
    for b in np.unique(idx):
        c, h = conf[idx == b], hit[idx == b]
        if len(c) > 1:
            total += len(c) / len(conf) * ((c.mean() - h.mean()) ** 2 - h.mean() * (1 - h.mean()) / (len(c) - 1))
    return float(np.sqrt(max(total, 0.0)))


def ece_floor(probs: Tensor, n_bins: int = 15, draws: int = 200, seed: int = 0) -> float:
    """The ECE that a perfectly calibrated model with these confidences scores on this many rows: the mean over
    ``draws`` label draws y* ~ Categorical(p_i), row by row (seeded), of ECE(p, y*). An ECE near it is as good as the
    rows can show. NaN when a row is not finite."""
    probs = checked_probabilities(probs).double()
    if not torch.isfinite(probs).all() or not len(probs):
        return float("nan")
    gen = torch.Generator().manual_seed(seed)
    p = probs.cpu()
    conf, pred = p.max(-1)
    drawn = torch.multinomial(p.clamp_min(0), draws, replacement=True, generator=gen)  # (N, draws)
    hit = (drawn == pred[:, None]).double()
    edges = torch.arange(1, n_bins, dtype=torch.float64) / n_bins
    idx = torch.bucketize(conf, edges, right=True)  # the bins of :func:`reliability`
    gap = torch.zeros(n_bins, draws, dtype=torch.float64).index_add_(0, idx, conf[:, None] - hit)
    return (gap.abs().sum(0) / len(p)).mean().item()


# ---------------------------------------------------------------------------- selective classification, OOD
def _tie_groups(sorted_scores: Tensor) -> tuple[Tensor, Tensor]:
    """For scores sorted in either direction: each position's tie group and the size of every group."""
    _, group, counts = torch.unique_consecutive(sorted_scores, return_inverse=True, return_counts=True)
    return group, counts


def selective_risks(confidence: Tensor, correct: Tensor) -> Tensor:
    """(N,) error rate among the k most confident rows, k = 1..N; rows of equal confidence are taken in random
    order, so inside a tie group the errors count at the group's rate (the expectation over those orders)."""
    confidence, errors = confidence.double().flatten(), (~correct.bool().flatten()).double()
    order = confidence.argsort(descending=True, stable=True)
    group, counts = _tie_groups(confidence[order])
    group_errors = torch.zeros(len(counts), dtype=torch.float64, device=errors.device).index_add_(
        0, group, errors[order]
    )
    before_n = counts.cumsum(0) - counts  # rows in the groups before each group
    before_e = group_errors.cumsum(0) - group_errors
    k = torch.arange(1, len(errors) + 1, dtype=torch.float64, device=errors.device)
    expected = before_e[group] + (k - before_n[group]) * group_errors[group] / counts[group]
    return expected / k


def aurc(probs: Tensor, labels: Tensor, confidence: Tensor | None = None) -> float:
    """Area under the risk-coverage curve (Geifman et al., 2019): the mean over coverages k/N of the error rate
    among the k most confident rows; confidence is the max probability unless given. Lower is better."""
    conf = probs.max(-1).values if confidence is None else confidence
    return selective_risks(conf, probs.argmax(-1) == labels).mean().item()


def accuracy_at_coverage(probs: Tensor, labels: Tensor, coverage: float) -> float:
    """Accuracy of the ⌈coverage·N⌉ rows of highest max probability (the rest abstained from)."""
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage must be in (0, 1], got {coverage}")
    risks = selective_risks(probs.max(-1).values, probs.argmax(-1) == labels)
    k = max(1, min(len(risks), int(torch.tensor(coverage * len(risks)).ceil())))
    return 1.0 - risks[k - 1].item()


def adaptive_ece(probs: Tensor, labels: Tensor, n_bins: int = 15) -> float:
    """Top-label L1 ECE with equal-mass bins: the rows sorted by confidence, cut into ``n_bins`` bins whose sizes
    differ by at most one (numpy's ``array_split``); NaN when a row is not finite; entries outside [0, 1] as
    :func:`checked_probabilities`."""
    probs = checked_probabilities(probs)
    if not torch.isfinite(probs).all():
        return float("nan")
    conf, pred = probs.double().max(-1)
    order = conf.argsort(stable=True)
    conf, correct = conf[order], (pred == labels).double()[order]
    n, n_bins = len(conf), min(int(n_bins), len(conf))
    sizes = torch.full((n_bins,), n // n_bins, dtype=torch.long)
    sizes[: n % n_bins] += 1
    bins = torch.repeat_interleave(torch.arange(n_bins), sizes).to(conf.device)
    gap = torch.zeros(n_bins, dtype=torch.float64, device=conf.device).index_add_(0, bins, conf - correct)
    return (gap.abs().sum() / n).item()


def _ranked_counts(scores: Tensor, positive: Tensor) -> tuple[Tensor, Tensor, int, int]:
    """True and false positives above each distinct threshold, from the highest score down (as scikit-learn)."""
    scores, positive = scores.double().flatten(), positive.bool().flatten()
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"OOD detection needs both in- and out-of-distribution rows; got {n_pos} OOD, {n_neg} ID")
    order = scores.argsort(descending=True, stable=True)
    _, counts = _tie_groups(scores[order])
    ends = counts.cumsum(0) - 1
    tps = positive[order].double().cumsum(0)[ends]
    return tps, (ends + 1).double() - tps, n_pos, n_neg


def aupr(scores: Tensor, positive: Tensor) -> float:
    """Average precision with ``positive`` (OOD) as the positive class and higher scores more OOD:
    Σ_n (R_n − R_{n−1}) P_n over the distinct thresholds (scikit-learn's ``average_precision_score``)."""
    tps, fps, n_pos, _ = _ranked_counts(scores, positive)
    recall = tps / n_pos
    return (torch.diff(recall, prepend=recall.new_zeros(1)) * tps / (tps + fps)).sum().item()


def fpr_at_tpr(scores: Tensor, positive: Tensor, tpr: float = 0.95) -> float:
    """False-positive rate at the highest threshold whose true-positive rate reaches ``tpr`` (OOD positive)."""
    tps, fps, n_pos, n_neg = _ranked_counts(scores, positive)
    first = int(torch.nonzero(tps / n_pos >= tpr)[0])
    return (fps[first] / n_neg).item()


def energy(logits: Tensor) -> Tensor:
    """The negative free energy −logsumexp(logits) (Liu et al., 2020): higher is more OOD."""
    return -torch.logsumexp(logits.double(), -1)


def ood_scores(probs: Tensor, uncertainty: Tensor, logits: Tensor | None = None) -> dict[str, Tensor]:
    """OOD scores (higher: more OOD) by name: ``""`` the model's own uncertainty, ``msp`` 1 − max probability,
    ``entropy`` of the mean prediction, ``energy`` where the model gives logits."""
    out = {"": uncertainty, "msp": 1.0 - probs.max(-1).values, "entropy": entropy(probs)}
    if logits is not None and torch.isfinite(logits).all():
        out["energy"] = energy(logits)
    return out


def ood_metrics(scores: Tensor, is_ood: Tensor) -> dict[str, float]:
    """AUROC, AUPR (OOD positive) and FPR at 95 % TPR of one score."""
    return {"auroc": auroc(scores, is_ood), "aupr": aupr(scores, is_ood), "fpr95": fpr_at_tpr(scores, is_ood)}


SELECTIVE_COVERAGES = (0.9,)


def selective_metrics(probs: Tensor, labels: Tensor, uncertainty: Tensor, n_bins: int = 15) -> dict[str, float]:
    """``aurc`` (max probability), ``aurc_unc`` (ranked by the model's own uncertainty), ``acc@cov90``,
    ``ece_adaptive``, ``ce_debiased`` and ``ece_floor``; those of rows that are not finite are NaN."""
    if not (torch.isfinite(probs).all() and torch.isfinite(uncertainty).all()):
        keys = ["aurc", "aurc_unc", "ece_adaptive", "ce_debiased", "ece_floor"]
        return dict.fromkeys([*keys, *(f"acc@cov{round(c * 100)}" for c in SELECTIVE_COVERAGES)], float("nan"))
    out = {"aurc": aurc(probs, labels), "aurc_unc": aurc(probs, labels, -uncertainty)}
    out.update({f"acc@cov{round(c * 100)}": accuracy_at_coverage(probs, labels, c) for c in SELECTIVE_COVERAGES})
    out["ece_adaptive"] = adaptive_ece(probs, labels, n_bins)
    out["ce_debiased"] = debiased_ce(probs, labels, n_bins)
    out["ece_floor"] = ece_floor(probs, n_bins)
    return out


def ood_results(name: str, store: dict[str, list[Tensor]]) -> tuple[dict, dict]:
    """One OOD set's metrics over every score (``ood/<set>/<metric>[@<score>]``) and its arrays, from the test
    loop's batches: the model's uncertainty ``unc``, ``is_ood``, ``probs`` and, for models with logits, ``logits``."""
    s, y = torch.cat(store["unc"]), torch.cat(store["is_ood"])
    p, logits = torch.cat(store["probs"]), torch.cat(store["logits"]) if "logits" in store else None
    results = {}
    for score, values in ood_scores(p, s, logits).items():
        results.update(
            {f"ood/{name}/{k}" + (f"@{score}" if score else ""): v for k, v in ood_metrics(values, y).items()}
        )
    return results, {
        f"ood/{name}/uncertainty": s.numpy(),
        f"ood/{name}/is_ood": y.numpy(),
        f"ood/{name}/probs": p.numpy(),
    }
