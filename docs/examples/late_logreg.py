"""The example model of docs/extending.md: late-fusion softmax regression (tests/test_extending.py trains it)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from mnp.framework.domains import POSITIVE
from mnp.framework.optim import make_optimizer
from mnp.framework.routine import Routine


class LateLogReg(Routine):
    """One linear softmax classifier per view; a row's prediction averages the views present in it.
    Uncertainty: the entropy of that average."""

    domains = dict(lr=POSITIVE)  # checked before anything is built: model.lr=-1 is one clear line

    def __init__(self, num_classes: int, view_dims: Sequence[int], lr: float = 1e-2):
        super().__init__(num_classes, view_dims)
        self.save_hyperparameters()  # evaluate.py and mnp.load rebuild the model from these
        self.heads = nn.ModuleList(nn.Linear(d, num_classes) for d in self.view_dims)
        self.lr = lr

    def view_probs(self, views: list[Tensor]) -> Tensor:
        """(M, B, K): each view's class probabilities."""
        return torch.stack([head(v).softmax(-1) for head, v in zip(self.heads, views)])

    def training_loss(self, views, y):
        log_p = self.view_probs(views).clamp_min(1e-12).log()
        loss = sum(nn.functional.nll_loss(lp, y) for lp in log_p) / len(log_p)
        return loss, {"acc": (log_p.sum(0).argmax(-1) == y).float().mean()}  # logged as train/acc

    def predict(self, views, present=None):
        p = self.view_probs(views)
        w = p.new_ones(p.shape[:2]) if present is None else present.t().to(p.dtype)  # (M, B): the views present
        probs = (p * w[..., None]).sum(0) / w.sum(0)[:, None]
        return probs[None], -(probs * probs.clamp_min(1e-12).log()).sum(-1)  # (S=1, B, K), (B,)

    def configure_optimizers(self):
        return make_optimizer(self.parameters(), lr=self.lr)
