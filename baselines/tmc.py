"""Trusted Multi-view Classification (Han et al., ICLR 2021) (docs/method.md §3, paper appendix "TMC").

Per view, evidence e = Softplus(Linear(x)) and a Dirichlet α = e + 1. The views' opinions are fused
pairwise by Dempster's rule of combination (subjective logic). Loss, per opinion (every view and the
fused one, summed): the evidential digamma term Σ_k y_k (ψ(S) − ψ(α_k)) plus
annealing · KL(Dir(α̃) ‖ Dir(1)), α̃ = y + (1 − y) ⊙ α, with annealing = min(1, epoch / annealing_epochs)
(the official code counts epochs from 1 and anneals over 50; the paper over 10).
Prediction: α/S of the fused opinion (one sample; ``probability=softmax_evidence``: softmax(α − 1), the reading that
gives the paper's TMC ECE on Handwritten and PIE, results/differences/tmc_ece.csv); uncertainty u = K/S of the fused
opinion.
The per-view linear layers run as one batched layer over zero-padded views. A missing view gives the
vacuous opinion (α = 1: no belief, u = 1), the identity of Dempster's rule, so the views present are fused.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from baselines.batched import BatchedLinear, pad_views
from mnp.framework.domains import COUNT, check_domains
from mnp.framework.optim import OPTIM_DOMAINS, make_optimizer, optim_settings
from mnp.framework.routine import Routine


def opinion(alpha: Tensor) -> tuple[Tensor, Tensor]:
    """Belief masses b = (α − 1)/S (…, K) and uncertainty u = K/S (…, 1)."""
    s = alpha.sum(-1, keepdim=True)
    return (alpha - 1) / s, alpha.shape[-1] / s


def dempster_combine(alpha1: Tensor, alpha2: Tensor) -> Tensor:
    """Dempster's rule for two Dirichlet opinions (TMC Definition 3.1); returns the fused α.

    C = Σ_{i≠j} b¹_i b²_j,  b_k = (b¹_k b²_k + b¹_k u² + b²_k u¹) / (1 − C),  u = u¹u² / (1 − C),
    then S = K/u and α = b S + 1.
    """
    b1, u1 = opinion(alpha1)
    b2, u2 = opinion(alpha2)
    conflict = b1.sum(-1, keepdim=True) * b2.sum(-1, keepdim=True) - (b1 * b2).sum(-1, keepdim=True)
    b = (b1 * b2 + b1 * u2 + b2 * u1) / (1 - conflict)
    u = u1 * u2 / (1 - conflict)
    return b * (alpha1.shape[-1] / u) + 1


def dempster_combine_all(alphas: Sequence[Tensor]) -> Tensor:
    """Fuse views left to right: ((α¹ ⊕ α²) ⊕ α³) ⊕ …"""
    fused = alphas[0]
    for a in alphas[1:]:
        fused = dempster_combine(fused, a)
    return fused


PROBABILITIES = ("dirichlet_mean", "softmax_evidence")


def kl_to_uniform_dirichlet(alpha: Tensor) -> Tensor:
    """KL(Dir(α) ‖ Dir(1, …, 1)) per row."""
    k = alpha.shape[-1]
    s = alpha.sum(-1)
    return (
        torch.lgamma(s)
        - torch.lgamma(alpha).sum(-1)
        - torch.lgamma(torch.tensor(float(k), device=alpha.device))
        + ((alpha - 1) * (torch.digamma(alpha) - torch.digamma(s)[..., None])).sum(-1)
    )


def evidential_loss(alpha: Tensor, onehot: Tensor, annealing: float) -> Tensor:
    """Per-sample digamma (expected cross-entropy) term plus the annealed KL of the misleading evidence."""
    s = alpha.sum(-1, keepdim=True)
    fit = (onehot * (torch.digamma(s) - torch.digamma(alpha))).sum(-1)
    alpha_tilde = onehot + (1 - onehot) * alpha
    return fit + annealing * kl_to_uniform_dirichlet(alpha_tilde)


class TMC(Routine):
    OPTIM = {"lr": 3e-3, "weight_decay": 1e-5}  # optim's defaults, as conf/model/ states them
    domains = dict(annealing_epochs=COUNT, optim=OPTIM_DOMAINS)  # mnp.framework.domains

    def __init__(
        self,
        num_classes: int,
        view_dims: Sequence[int],
        annealing_epochs: int = 10,
        optim: dict | None = None,
        probability: str = "dirichlet_mean",
    ):
        super().__init__(num_classes, view_dims)
        self.save_hyperparameters()
        check_domains(self.domains, self.hparams)
        if len(self.view_dims) < 2:
            raise ValueError("TMC fuses several views; the data has only one")
        if probability not in PROBABILITIES:
            raise ValueError(f"unknown model.probability '{probability}'; choose one of {', '.join(PROBABILITIES)}")
        self.probability = probability
        self.evidence_net = BatchedLinear(len(self.view_dims), max(self.view_dims), num_classes, fan_in=self.view_dims)
        self.annealing_epochs = int(annealing_epochs)
        self.optim_cfg = optim_settings(self.OPTIM, optim)

    def view_alphas(self, views: list[Tensor]) -> Tensor:
        """(M, B, K) Dirichlet parameters α = softplus(evidence) + 1 of every view."""
        return nn.functional.softplus(self.evidence_net(pad_views(views))) + 1

    def training_loss(self, views, y):
        alphas = self.view_alphas(views)
        fused = dempster_combine_all(list(alphas))
        onehot = nn.functional.one_hot(y, self.num_classes).to(alphas.dtype)
        annealing = min(1.0, (self.current_epoch + 1) / self.annealing_epochs)
        per_opinion = evidential_loss(torch.cat([alphas, fused[None]]), onehot, annealing)  # (M + 1, B)
        loss = per_opinion.sum(0).mean()
        return loss, {
            "acc": (fused.argmax(-1) == y).float().mean(),
            "annealing": torch.tensor(annealing, device=y.device),
        }

    def predict(self, views, present=None):
        alphas = self.view_alphas(views)
        if present is not None:
            alphas = alphas.masked_fill(~present.t().unsqueeze(-1), 1.0)
        fused = dempster_combine_all(list(alphas))
        s = fused.sum(-1, keepdim=True)
        probs = (fused - 1).softmax(-1) if self.probability == "softmax_evidence" else fused / s
        return probs[None], (self.num_classes / s).squeeze(-1)

    def configure_optimizers(self):
        return make_optimizer(
            self.parameters(), max_epochs=self.trainer.max_epochs if self._trainer else 100, **self.optim_cfg
        )
