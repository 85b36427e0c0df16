"""Optimiser and learning-rate schedules shared by every model (docs/method.md §2)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Mapping, Sequence

import torch

from mnp.checks import choice
from mnp.framework.domains import NATURAL, NON_NEGATIVE, POSITIVE, each

# the documented domains of make_optimizer's numeric arguments: every model's ``optim`` keys (mnp.framework.domains);
# max_epochs is not among them, the models pass trainer.max_epochs
OPTIM_DOMAINS = {
    "lr": POSITIVE,
    "weight_decay": NON_NEGATIVE,
    "eps": POSITIVE,
    "milestones": each(NATURAL),
    "values": each(NON_NEGATIVE),
}


# Kept over torch's LinearLR / SequentialLR of ConstantLRs (issue 33): LinearLR updates lr ← lr·(1 + …) in place,
# 6e-7 off after 100 epochs in the float32 lr tensor of a CUDA-graph step; both refuse factors above 1 (values
# above lr); SequentialLR cannot load the LambdaLR state of existing checkpoints; constant alone is no gain.
def lr_lambda(schedule: str, milestones: Sequence[int], values: Sequence[float], base_lr: float, max_epochs: int):
    """Epoch -> multiplier of ``base_lr``.

    ``piecewise``: lr = values[i] after milestones[i-1] (values has one more entry than milestones);
    ``linear``: linear decay from base_lr to values[-1] (or 0) over max_epochs; ``constant``.
    """
    if schedule == "constant":
        return lambda epoch: 1.0
    if schedule == "piecewise":
        if len(values) != len(milestones) + 1:
            raise ValueError(
                f"piecewise schedule needs len(values) == len(milestones) + 1, got {values} / {milestones}"
            )

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


EPS_PLACEMENTS = ("torch", "keras")
SCHEDULES = ("constant", "piecewise", "linear")


def set_lr(group: dict, lr: float) -> None:
    """Set a param group's learning rate, in place where it is a tensor (a captured step reads that tensor)."""
    if isinstance(group["lr"], torch.Tensor):
        group["lr"].fill_(lr)
    else:
        group["lr"] = lr


def keras_eps_(opt: torch.optim.Adam) -> torch.optim.Adam:
    """Make torch's Adam place ε as Keras does (official code), by rescaling ε before every step.

    Keras: θ −= lr·√(1−β2ᵗ)/(1−β1ᵗ) · m / (√v + ε); torch: θ −= lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + ε').
    They agree when ε' = ε/√(1−β2ᵗ), t counted per optimiser (Keras' ``iterations``). The step count
    and the Keras ε live in the param groups, so they are checkpointed with the optimiser.
    """
    for g in opt.param_groups:
        g.setdefault("keras_eps", g["eps"])
        g.setdefault("keras_step", 0)

    def pre_step(optimizer, args, kwargs) -> None:
        for g in optimizer.param_groups:
            g["keras_step"] += 1
            g["eps"] = g["keras_eps"] / math.sqrt(1.0 - g["betas"][1] ** g["keras_step"])

    opt.register_step_pre_hook(pre_step)
    return opt


def make_optimizer(
    params: Iterable,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    eps: float = 1e-8,
    schedule: str = "constant",
    milestones: Sequence[int] = (),
    values: Sequence[float] = (),
    max_epochs: int = 100,
    fused: bool | None = None,
    eps_placement: str = "torch",
) -> dict:
    """Adam plus an epoch-wise LambdaLR, in Lightning's ``configure_optimizers`` format.

    ``weight_decay`` is coupled L2 (added to the gradient), as Keras' kernel regulariser in the
    official code. ``fused``: torch's single-kernel Adam (same update; None = torch's default).
    ``eps_placement``: torch (ε added to √v̂) | keras (ε added to √v, official code; :func:`keras_eps_`).
    """
    if eps_placement not in EPS_PLACEMENTS:
        raise ValueError(f"unknown eps_placement '{eps_placement}'; choose torch or keras")
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, eps=eps, fused=fused)
    if eps_placement == "keras":
        keras_eps_(opt)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(schedule, list(milestones), list(values), lr, max_epochs))
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


def optim_settings(defaults: Mapping, given) -> dict:
    """A baseline's ``optim`` argument over its ``defaults``, checked as MNP's optimiser part checks its own (one
    line naming ``model.optim``): a mapping of :func:`make_optimizer`'s settings, its words known, so that a bad
    one fails at construction, not at fit (the numbers' domains: the model's ``check_domains``)."""
    if given is not None and not isinstance(given, Mapping):
        raise ValueError(f"model.optim must be a mapping of its settings, got {given!r}")
    known = [k for k in inspect.signature(make_optimizer).parameters if k not in ("params", "max_epochs", "fused")]
    if unknown := [k for k in given or {} if k not in known]:
        raise ValueError(f"model.optim has no setting {unknown[0]!r}; it takes {', '.join(known)}")
    settings = {**defaults, **(given or {})}
    choice("model.optim.schedule", settings.get("schedule", "constant"), SCHEDULES)
    choice("model.optim.eps_placement", settings.get("eps_placement", "torch"), EPS_PLACEMENTS)
    return settings
