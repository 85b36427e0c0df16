"""MC Dropout (Gal & Ghahramani 2016) on the concatenated views (docs/method.md §3, paper appendix "MC Dropout")."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from baselines.mlp import mlp
from mnp.eval import metrics
from mnp.eval.missing import MeanImputation
from mnp.framework.domains import COUNT, NATURAL, Domain, check_domains, each
from mnp.framework.optim import OPTIM_DOMAINS, make_optimizer, optim_settings
from mnp.framework.routine import Routine


class MCDropout(MeanImputation, Routine):
    """Early-fusion MLP with dropout kept on at prediction time; a missing view takes its training means.

    ``mc_samples`` stochastic passes are drawn in one batched forward: the layers before the first
    dropout run once on (B, d), everything after it on (S, B, h). ``mc_samples: 0`` turns sampling
    off: one deterministic pass with dropout disabled. Uncertainty: predictive entropy.
    """

    # mnp.framework.domains; mc_samples 0: one deterministic pass with dropout off
    OPTIM = {}  # optim's defaults, as conf/model/ states them
    domains = dict(
        hidden=each(COUNT), dropout=Domain(0, 1, low_open=True, high_open=True), mc_samples=NATURAL, optim=OPTIM_DOMAINS
    )

    def __init__(
        self,
        num_classes: int,
        view_dims: Sequence[int],
        hidden: Sequence[int] = (512, 256),
        dropout: float = 0.2,
        mc_samples: int = 100,
        optim: dict | None = None,
    ):
        super().__init__(num_classes, view_dims)
        self.save_hyperparameters()
        check_domains(self.domains, self.hparams)
        self.net = mlp(sum(self.view_dims), hidden, num_classes, dropout)
        self.mc_samples = int(mc_samples)
        self.optim_cfg = optim_settings(self.OPTIM, optim)
        self.init_imputation()

    def sample_logits(self, x: Tensor, samples: int) -> Tensor:
        """(S, B, K) logits with dropout active; S = 1 and dropout off when ``samples`` is 0. The masks come
        from ``sample_generator`` in the test loops, from the global RNG elsewhere."""
        h = x
        for layer in self.net:
            if isinstance(layer, nn.Dropout):
                if samples == 0:
                    continue
                if h.dim() == 2:
                    h = h.expand(samples, *h.shape)
                keep = torch.empty_like(h).bernoulli_(1 - layer.p, generator=self.sample_generator)
                h = h * keep / (1 - layer.p)
            else:
                h = layer(h)
        return h if h.dim() == 3 else h[None]

    def training_loss(self, views, y):
        logits = self.net(torch.cat(views, dim=-1))
        return nn.functional.cross_entropy(logits, y), {"acc": (logits.argmax(-1) == y).float().mean()}

    def predict(self, views, present=None):
        probs = self.sample_logits(torch.cat(self.impute(views, present), dim=-1), self.mc_samples).softmax(-1)
        return probs, metrics.entropy(probs.mean(0))

    def configure_optimizers(self):
        return make_optimizer(
            self.parameters(), max_epochs=self.trainer.max_epochs if self._trainer else 100, **self.optim_cfg
        )
