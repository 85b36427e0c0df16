"""Deep Ensembles (Lakshminarayanan et al. 2017), early and late fusion (docs/method.md §3, paper appendix
"Deep Ensemble").

* ``fusion: early`` (DE(EF)): ``members`` MLPs on the concatenated views.
* ``fusion: late`` (DE(LF)): one MLP per view; the views are zero-padded to a common width so the
  M classifiers still run as one batched ensemble (the padded weights only ever meet zeros).

Members are trained together but independently: the loss is the sum of the members' own
cross-entropies, so no member sees another's gradient. ``predict`` returns the members' softmaxes
as the sample axis (E, B, K); the routine averages them.

Missing views: DE(EF) imputes a missing view's training means; DE(LF) averages the members of the
views present (an absent view's member is replaced by that mean, so the routine's average is it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from baselines.batched import BatchedMLP, pad_views
from mnp.eval import metrics
from mnp.eval.missing import MeanImputation
from mnp.framework.domains import COUNT, check_domains, each
from mnp.framework.optim import OPTIM_DOMAINS, make_optimizer, optim_settings
from mnp.framework.routine import Routine


def member_variance(probs: Tensor, present: Tensor | None = None) -> Tensor:
    """Σ_k Var_e[p_ek]: the variance across members summed over classes, (E, B, K) -> (B,); with ``present``
    (B, E), across the members present in each row."""
    if present is None:
        return probs.var(0, unbiased=False).sum(-1)
    w = present.t().unsqueeze(-1).to(probs.dtype)
    mean = (probs * w).sum(0) / w.sum(0)
    return ((probs - mean).pow(2) * w).sum(0).sum(-1) / w.sum(0).squeeze(-1)


def present_members(probs: Tensor, present: Tensor) -> Tensor:
    """(E, B, K) with every absent member's probabilities replaced by the mean of the members present."""
    w = present.t().unsqueeze(-1)
    mean = (probs * w.to(probs.dtype)).sum(0) / w.sum(0)
    return torch.where(w, probs, mean)


class DeepEnsemble(MeanImputation, Routine):
    """Uncertainty: ``variance`` (member_variance, the paper's choice) or ``entropy`` of the average."""

    OPTIM = {}  # optim's defaults, as conf/model/ states them
    domains = dict(members=COUNT, hidden=each(COUNT), optim=OPTIM_DOMAINS)  # mnp.framework.domains

    def __init__(
        self,
        num_classes: int,
        view_dims: Sequence[int],
        fusion: str = "early",
        members: int = 5,
        hidden: Sequence[int] = (512, 256),
        uncertainty: str = "variance",
        optim: dict | None = None,
    ):
        super().__init__(num_classes, view_dims)
        self.save_hyperparameters()
        check_domains(self.domains, self.hparams)
        if fusion not in {"early", "late"}:
            raise ValueError(f"unknown fusion '{fusion}'; choose early or late")
        if uncertainty not in {"variance", "entropy"}:
            raise ValueError(f"unknown uncertainty '{uncertainty}'; choose variance or entropy")
        self.fusion, self.uncertainty = fusion, uncertainty
        if fusion == "early":
            self.net = BatchedMLP(members, sum(self.view_dims), hidden, num_classes)
        else:  # one classifier per view, each initialised for its own input width
            self.net = BatchedMLP(len(self.view_dims), max(self.view_dims), hidden, num_classes, fan_in=self.view_dims)
        self.optim_cfg = optim_settings(self.OPTIM, optim)
        if fusion == "early":
            self.init_imputation()

    def logits(self, views: list[Tensor]) -> Tensor:
        """(E, B, K) logits of every member."""
        x = torch.cat(views, dim=-1) if self.fusion == "early" else pad_views(views)
        return self.net(x)

    def training_loss(self, views, y):
        logits = self.logits(views)
        e, b, k = logits.shape
        loss = nn.functional.cross_entropy(logits.reshape(e * b, k), y.repeat(e), reduction="sum") / b
        return loss, {"acc": (logits.softmax(-1).mean(0).argmax(-1) == y).float().mean()}

    def predict(self, views, present=None):
        if self.fusion == "early":
            views, present = self.impute(views, present), None
        probs = self.logits(views).softmax(-1)
        unc = member_variance(probs, present) if self.uncertainty == "variance" else None
        if present is not None:
            probs = present_members(probs, present)
        return probs, metrics.entropy(probs.mean(0)) if unc is None else unc

    def extra_scores(self, probs):
        return {"entropy": metrics.entropy(probs.mean(0)), "variance": member_variance(probs)}

    def configure_optimizers(self):
        return make_optimizer(
            self.parameters(), max_epochs=self.trainer.max_epochs if self._trainer else 100, **self.optim_cfg
        )
