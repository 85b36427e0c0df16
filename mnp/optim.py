"""Optimiser and learning-rate schedules shared by every model (SPEC §2)."""
from __future__ import annotations

from typing import Iterable, Sequence

import torch


def lr_lambda(schedule: str, milestones: Sequence[int], values: Sequence[float], base_lr: float, max_epochs: int):
    """Epoch -> multiplier of ``base_lr``.

    ``piecewise``: lr = values[i] after milestones[i-1] (values has one more entry than milestones);
    ``linear``: linear decay from base_lr to values[-1] (or 0) over max_epochs; ``constant``.
    """
    if schedule == "constant":
        return lambda epoch: 1.0
    if schedule == "piecewise":
        if len(values) != len(milestones) + 1:
            raise ValueError(f"piecewise schedule needs len(values) == len(milestones) + 1, got {values} / {milestones}")

        def f(epoch: int) -> float:
            i = sum(epoch >= m for m in milestones)
            return values[i] / base_lr
        return f
    if schedule == "linear":
        end = values[-1] if values else 0.0

        def g(epoch: int) -> float:
            frac = min(epoch / max(max_epochs, 1), 1.0)
            return (base_lr + frac * (end - base_lr)) / base_lr
        return g
    raise ValueError(f"unknown lr schedule '{schedule}'; choose constant, piecewise or linear")


def make_optimizer(params: Iterable, lr: float = 1e-3, weight_decay: float = 0.0, eps: float = 1e-8,
                   schedule: str = "constant", milestones: Sequence[int] = (), values: Sequence[float] = (),
                   max_epochs: int = 100, fused: bool | None = None) -> dict:
    """Adam plus an epoch-wise LambdaLR, in Lightning's ``configure_optimizers`` format.

    ``weight_decay`` is coupled L2 (added to the gradient), as Keras' kernel regulariser in the
    official code. ``fused``: torch's single-kernel Adam (same update; None = torch's default).
    """
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, eps=eps, fused=fused)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(schedule, list(milestones), list(values), lr, max_epochs))
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}
