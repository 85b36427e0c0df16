"""Early-fusion MLP: the simplest model, proving the pipeline end to end."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from mnp.eval.missing import MeanImputation
from mnp.framework.domains import COUNT, Domain, check_domains, each
from mnp.framework.optim import OPTIM_DOMAINS, make_optimizer, optim_settings
from mnp.framework.routine import Routine


def mlp(d_in: int, hidden: Sequence[int], d_out: int, dropout: float = 0.0) -> nn.Sequential:
    """FC → ReLU (→ Dropout) blocks followed by a linear output layer."""
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(d_in, h), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        d_in = h
    layers.append(nn.Linear(d_in, d_out))
    return nn.Sequential(*layers)


class MLP(MeanImputation, Routine):
    """Concatenate the views, classify with an MLP; uncertainty is the predictive entropy. A missing view
    takes its training means (early fusion)."""

    OPTIM = {}  # optim's defaults, as conf/model/ states them
    domains = dict(hidden=each(COUNT), dropout=Domain(0, 1, high_open=True), optim=OPTIM_DOMAINS)  # framework.domains

    def __init__(
        self,
        num_classes: int,
        view_dims: Sequence[int],
        hidden: Sequence[int] = (512, 256),
        dropout: float = 0.0,
        optim: dict | None = None,
    ):
        super().__init__(num_classes, view_dims)
        self.save_hyperparameters()
        check_domains(self.domains, self.hparams)
        self.net = mlp(sum(self.view_dims), hidden, num_classes, dropout)
        self.optim_cfg = optim_settings(self.OPTIM, optim)
        self.init_imputation()

    def logits(self, views: list[Tensor]) -> Tensor:
        return self.net(torch.cat(views, dim=-1))

    def ood_logits(self, views: list[Tensor]) -> Tensor:
        return self.logits(views)

    def training_loss(self, views, y):
        logits = self.logits(views)
        loss = nn.functional.cross_entropy(logits, y)
        return loss, {"acc": (logits.argmax(-1) == y).float().mean()}

    def predict(self, views, present=None):
        probs = self.logits(self.impute(views, present)).softmax(-1)[None]
        return probs, -(probs[0] * probs[0].clamp_min(1e-12).log()).sum(-1)

    def configure_optimizers(self):
        return make_optimizer(
            self.parameters(), max_epochs=self.trainer.max_epochs if self._trainer else 100, **self.optim_cfg
        )
