"""Training the single views harder (issue 31, docs/method.md §1.9): two switches of MNP, both off by default.

``view_loss_weight`` λ: eq. 14 already holds each view's unimodal NLL with weight 1/M; λ adds λ times their
mean again,

    L_TY^λ = −E[log T̂_Y] − (1 + λ) (1/M) Σ_m E[log T̂^m_Y],

each T̂^m_Y decoded from view m's own posterior (eq. 8 with its terms alone, :mod:`mnp.model.view_predictions`), so the
extra gradient reaches view m's encoder through view m's prediction alone.

``view_dropout`` p: in training, each view of each target leaves the fused posterior (eq. 8, weight 0) with
probability p, after ``modality_mask``'s subset when both are on; a row left with no view keeps one of its views,
drawn uniformly, so a view's drop rate is p − p^M / M with all M views present. The unimodal terms, L_RBF and the
memory update still see every view; inference fuses every view.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mnp.model.aggregation import random_modality_mask


def view_dropout_mask(present: Tensor, p: float) -> Tensor:
    """(B, M) fusion weights: each view present in ``present`` (B, M) (1: present, every row with at least one)
    kept with probability 1 − p; a row that loses all its views keeps the one with the largest draw, a uniform
    pick among its views (the draws are i.i.d.). One random draw, no host sync."""
    draw = torch.rand(present.shape, device=present.device)
    kept = present * (draw >= p).to(present.dtype)
    pick = torch.zeros_like(present).scatter_(1, (draw * present).argmax(1, keepdim=True), 1.0)
    return torch.where(kept.sum(1, keepdim=True) > 0, kept, pick)


def fusion_weights(
    batch: int,
    num_views: int,
    device: torch.device,
    modality_mask: bool,
    view_dropout: float,
    subsets: Tensor | None = None,
) -> Tensor | None:
    """The training step's (B, M) weights of eq. 8: ``modality_mask``'s subsets (``subsets``: its draws,
    :func:`mnp.model.aggregation.modality_draws`), then ``view_dropout``; None (every view) when both are off."""
    weights = random_modality_mask(batch, num_views, device, subsets) if modality_mask else None
    if view_dropout > 0:
        present = torch.ones(batch, num_views, device=device) if weights is None else weights
        weights = view_dropout_mask(present, view_dropout)
    return weights


def predictive_loss(nll: Tensor, view_loss_weight: float = 0.0) -> tuple[Tensor, Tensor]:
    """L_TY^λ from the NLLs (1 + M,) of the fused prediction then each view's, and the views' mean NLL."""
    views = nll[1:].mean()
    ty = nll[0] + views  # eq. 14
    return (ty + view_loss_weight * views if view_loss_weight else ty), views
