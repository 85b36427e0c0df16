"""Evidential Turing Process (Kandemir et al., ICLR 2022) on the concatenated views
(docs/method.md §3, paper appendix "ETP"), after the authors' ``etp.py`` with a linear projector as the
architecture and a context memory of 200 rows.

* projector: h = W x (K-dimensional, as the official architecture's output);
* memory M (R × K) and a Gaussian memory sample M̃ ~ N(M, σ_m²);
* attention a = softmax(h · key(M̃)ᵀ / √K) M̃;
* logits ℓ = head([h; a]) clipped at 15, Dirichlet α = exp(ℓ), class probabilities α/S = softmax(ℓ);
* loss: Σ_k y_k (ψ(S) − ψ(α_k)) + kl_weight · KL(Dir(α) ‖ Dir(exp(a))), averaged over the batch;
* after every training batch, M ← tanh(γ M + (1 − γ) wᵀ (y + softmax(h))) over a random number
  n ∈ [3, max_context) of the batch's targets, w their attention weights on a fresh memory sample.

Prediction draws ``samples`` memory samples in one batched pass (S, B, K); uncertainty is the
entropy of the mean prediction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.distributions import Dirichlet, kl_divergence

from mnp.eval import metrics
from mnp.eval.missing import MeanImputation
from mnp.framework.domains import COUNT, NON_NEGATIVE, POSITIVE, UNIT, Domain, check_domains
from mnp.framework.optim import OPTIM_DOMAINS, make_optimizer, optim_settings
from mnp.framework.routine import Routine

LOGIT_MIN = -15.0  # numerical guard (not in the official code): keeps α = exp(ℓ) > 0 in float32


class ETP(MeanImputation, Routine):
    """Early fusion: a missing view takes its training means."""

    # mnp.framework.domains; the memory update uses n in [3, max_context) targets per batch
    OPTIM = {"lr": 1e-2}  # optim's defaults, as conf/model/ states them
    domains = dict(
        memory_size=COUNT,
        memory_lr=UNIT,
        memory_std=NON_NEGATIVE,
        kl_weight=NON_NEGATIVE,
        max_context=Domain(4, integer=True),
        logit_max=POSITIVE,
        samples=COUNT,
        optim=OPTIM_DOMAINS,
    )

    def __init__(
        self,
        num_classes: int,
        view_dims: Sequence[int],
        memory_size: int = 200,
        memory_lr: float = 0.99,
        memory_std: float = 0.1,
        kl_weight: float = 1e-3,
        max_context: int = 50,
        logit_max: float = 15.0,
        samples: int = 10,
        optim: dict | None = None,
    ):
        super().__init__(num_classes, view_dims)
        self.save_hyperparameters()
        check_domains(self.domains, self.hparams)
        k = num_classes
        self.projector = nn.Linear(sum(self.view_dims), k)
        self.key = nn.Linear(k, k)
        self.head = nn.Linear(2 * k, k)
        self.register_buffer("memory", (0.01 * torch.randn(memory_size, k)).pow(2))
        self.memory_lr, self.memory_std, self.kl_weight = memory_lr, memory_std, kl_weight
        self.max_context, self.logit_max, self.samples = int(max_context), logit_max, int(samples)
        self.optim_cfg = optim_settings(self.OPTIM, optim)
        self.init_imputation()

    def memory_sample(self, n: int) -> Tensor:
        """(n, R, K) Gaussian samples around the memory (from ``sample_generator`` in the test loops)."""
        return self.memory + self.memory_std * torch.randn(
            n, *self.memory.shape, device=self.memory.device, dtype=self.memory.dtype, generator=self.sample_generator
        )

    def attention_weights(self, h: Tensor, memory: Tensor) -> Tensor:
        """softmax over memory rows of h · key(M̃)ᵀ / √K: (B, K), (S, R, K) -> (S, B, R)."""
        return torch.softmax(h @ self.key(memory).transpose(-1, -2) / math.sqrt(self.num_classes), dim=-1)

    def forward_samples(self, views: list[Tensor], samples: int) -> tuple[Tensor, Tensor, Tensor]:
        """Projection h (B, K), attention a (S, B, K) and clipped logits (S, B, K)."""
        h = self.projector(torch.cat(views, dim=-1))
        memory = self.memory_sample(samples)
        a = self.attention_weights(h, memory) @ memory
        logits = self.head(torch.cat([h.expand_as(a), a], dim=-1))
        return h, a, logits.clamp(LOGIT_MIN, self.logit_max)

    @torch.no_grad()
    def update_memory(self, h: Tensor, y: Tensor) -> None:
        n = int(torch.randint(3, max(self.max_context, 4), ()).item())
        h, y = h[:n], y[:n]
        new = nn.functional.one_hot(y, self.num_classes).to(h.dtype) + h.softmax(-1)
        w = self.attention_weights(h, self.memory_sample(1))[0]  # (n, R)
        g = self.memory_lr
        self.memory.copy_(torch.tanh(g * self.memory + (1 - g) * w.t() @ new))

    def training_loss(self, views, y):
        h, a, logits = self.forward_samples(views, 1)
        a, logits = a[0], logits[0]
        alpha = logits.exp()
        onehot = nn.functional.one_hot(y, self.num_classes).to(alpha.dtype)
        fit = (onehot * (torch.digamma(alpha.sum(-1, keepdim=True)) - torch.digamma(alpha))).sum(-1)
        reg = kl_divergence(Dirichlet(alpha, validate_args=False), Dirichlet(a.exp(), validate_args=False))
        self.update_memory(h.detach(), y)
        loss = (fit + self.kl_weight * reg).mean()
        return loss, {"kl": reg.mean(), "acc": (logits.argmax(-1) == y).float().mean()}

    def predict(self, views, present=None):
        probs = self.forward_samples(self.impute(views, present), self.samples)[2].softmax(-1)
        return probs, metrics.entropy(probs.mean(0))

    def configure_optimizers(self):
        return make_optimizer(
            self.parameters(), max_epochs=self.trainer.max_epochs if self._trainer else 100, **self.optim_cfg
        )
