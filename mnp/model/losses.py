"""Losses of MNP: the predictive NLL (eq. 14), the supervised contrastive loss (eq. 10) and the
unimodal errors that drive the context-memory update (eq. 3)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

TY_LOSSES = ("nll_of_mean", "mean_ce")
ERRORS = ("mse", "ce")


def predictive_nll(logits: Tensor, y: Tensor, kind: str = "nll_of_mean", smoothing: float = 0.0) -> Tensor:
    """NLL of the labels under logit samples (S, ..., B, K), averaged over B: shape (...).

    ``nll_of_mean``: −log E_s[softmax] (paper, eq. 14); ``mean_ce``: E_s[−log softmax] (official).
    ``smoothing`` ε (ours, label smoothing, a calibration candidate): the cross entropy of the target
    (1 − ε)·one-hot + ε/K with the same predictive, (1 − ε)·NLL + ε·mean_k(−log p_k); 0 is eq. 14.
    """
    logp = logits.float().log_softmax(-1)
    idx = y.expand(*logp.shape[:-1]).unsqueeze(-1)
    logp_y = logp.gather(-1, idx).squeeze(-1)  # (S, ..., B)
    if kind == "nll_of_mean":
        per_target = -(logp_y.logsumexp(0) - math.log(logp_y.shape[0]))
        uniform = lambda: -(logp.logsumexp(0) - math.log(logp.shape[0])).mean(-1)  # noqa: E731
    elif kind == "mean_ce":
        per_target = -logp_y.mean(0)
        uniform = lambda: -logp.mean(-1).mean(0)  # noqa: E731
    else:
        raise ValueError(f"unknown ty_loss '{kind}'; choose one of {', '.join(TY_LOSSES)}")
    if smoothing:
        per_target = (1.0 - smoothing) * per_target + smoothing * uniform()
    return per_target.mean(-1)


def supervised_contrastive(similarity: Tensor, y: Tensor, tau: float, self_in_denominator: bool = False) -> Tensor:
    """Supervised contrastive loss (eq. 10) per modality from target-target similarities (M, B, B).

    Logits κ(t_i, t_j)/τ; anchors i with at least one positive p ≠ i of the same label; the
    denominator runs over all n ≠ i. ``self_in_denominator`` reproduces the official code, where the
    masked self pair leaks exp(0) = 1 into the denominator. Returns (M,): the mean over anchors.
    """
    logits = similarity.float() / tau
    eye = torch.eye(y.shape[0], dtype=torch.bool, device=y.device)
    others = logits.masked_fill(eye, 0.0) if self_in_denominator else logits.masked_fill(eye, float("-inf"))
    log_prob = logits - others.logsumexp(-1, keepdim=True)
    pos = (y[:, None] == y[None, :]) & ~eye
    n_pos = pos.sum(-1)
    mean_pos = log_prob.masked_fill(~pos, 0.0).sum(-1) / n_pos.clamp_min(1)
    anchors = n_pos > 0
    return -(mean_pos * anchors).sum(-1) / anchors.sum().clamp_min(1)


def unimodal_error(probs: Tensor, y: Tensor, kind: str = "mse") -> Tensor:
    """Error of each unimodal prediction (M, B, K) -> (M, B): (1/K) Σ_k (y − p̂)² (eq. 3) or −log p̂_y."""
    if kind == "mse":
        onehot = (y[:, None] == torch.arange(probs.shape[-1], device=y.device)).to(
            probs.dtype
        )  # no range check: no sync
        return (onehot - probs).pow(2).mean(-1)
    if kind == "ce":
        return -probs.gather(-1, y.expand(probs.shape[0], -1).unsqueeze(-1)).squeeze(-1).clamp_min(1e-12).log()
    raise ValueError(f"unknown error '{kind}'; choose one of {', '.join(ERRORS)}")
