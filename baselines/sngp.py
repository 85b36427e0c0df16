"""SNGP (Liu et al. 2020): the random-feature GP output layer alone, on the concatenated views
(docs/method.md §3, paper appendix "SNGP": the shared feature extractor replaces SNGP's spectral-normalised
network, so only the GP layer is used).

Follows edward2's ``RandomFeatureGaussianProcess`` + ``LaplaceRandomFeatureCovariance``:

* random Fourier features φ(x) = √(2/D) cos(W x / √kernel_scale + b), W ~ N(0, 1), b ~ U(0, 2π), fixed;
* logits = φ β with β trained by cross-entropy plus an L2 penalty;
* Laplace precision P = ridge·I + Σ_batches φᵀφ (Gaussian likelihood), reset at the start of every
  epoch; ``cov_momentum`` < 0 sums without momentum (the paper), in (0, 1) uses edward2's moving
  average;
* predictive variance σ²(x) = ridge · φ(x)ᵀ P⁻¹ φ(x); before any data P = ridge·I, so σ²(x) = ‖φ(x)‖²;
* mean-field logits logit / √(1 + λ σ²), λ = π/8;
* uncertainty (Dempster-Shafer): u = K / (K + Σ_k exp(logit_k)) of the mean-field logits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from mnp.eval.missing import MeanImputation
from mnp.framework.domains import COUNT, NON_NEGATIVE, POSITIVE, Domain, check_domains, optional
from mnp.framework.optim import OPTIM_DOMAINS, make_optimizer, optim_settings
from mnp.framework.routine import Routine


def mean_field_logits(logits: Tensor, variance: Tensor, factor: float = math.pi / 8) -> Tensor:
    """logits (B, K) / √(1 + λ σ²) with σ² (B,) the predictive variance."""
    return logits / torch.sqrt(1.0 + factor * variance)[:, None]


def dempster_shafer(logits: Tensor) -> Tensor:
    """u = K / (K + Σ_k exp(logit_k)), computed in log space."""
    k = logits.shape[-1]
    return torch.exp(math.log(k) - torch.logaddexp(torch.full_like(logits[:, 0], math.log(k)), logits.logsumexp(-1)))


class SNGP(MeanImputation, Routine):
    """Early fusion: a missing view takes its training means."""

    OPTIM = {"lr": 1e-2}  # optim's defaults, as conf/model/ states them
    # mnp.framework.domains; cov_momentum <= 0: the precision summed over each epoch, in (0, 1): a moving average
    domains = dict(
        num_features=COUNT,
        kernel_scale=optional(POSITIVE),
        ridge=POSITIVE,
        cov_momentum=Domain(high=1, high_open=True),
        mean_field_factor=NON_NEGATIVE,
        l2=NON_NEGATIVE,
        optim=OPTIM_DOMAINS,
    )

    def __init__(
        self,
        num_classes: int,
        view_dims: Sequence[int],
        num_features: int = 1024,
        kernel_scale: float | None = None,
        normalize_input: bool = True,
        ridge: float = 1.0,
        cov_momentum: float = -1.0,
        mean_field_factor: float = math.pi / 8,
        l2: float = 1e-6,
        optim: dict | None = None,
    ):
        super().__init__(num_classes, view_dims)
        self.save_hyperparameters()
        check_domains(self.domains, self.hparams)
        d = sum(self.view_dims)
        # kernel_scale None: d, i.e. an RBF length-scale of √d, so distances are per-feature averages
        self.input_scale = 1.0 / math.sqrt(d if kernel_scale is None else kernel_scale)
        self.norm = nn.LayerNorm(d) if normalize_input else nn.Identity()
        self.register_buffer("rff_weight", torch.randn(d, num_features))
        self.register_buffer("rff_bias", torch.rand(num_features) * 2 * math.pi)
        self.beta = nn.Linear(num_features, num_classes, bias=False)
        self.register_buffer("precision", ridge * torch.eye(num_features))
        self.ridge, self.cov_momentum, self.mean_field_factor, self.l2 = ridge, cov_momentum, mean_field_factor, l2
        self.num_features = num_features
        self._cov_cache: tuple[tuple, Tensor] | None = None  # ridge · P⁻¹, keyed on P's storage and version
        self.optim_cfg = optim_settings(self.OPTIM, optim)
        self.init_imputation()

    def features(self, views: list[Tensor]) -> Tensor:
        x = self.norm(torch.cat(views, dim=-1)) * self.input_scale
        return math.sqrt(2.0 / self.num_features) * torch.cos(x @ self.rff_weight + self.rff_bias)

    # ------------------------------------------------------------------ Laplace precision
    def reset_precision(self) -> None:
        self.precision.copy_(self.ridge * torch.eye(self.num_features, device=self.precision.device))

    @torch.no_grad()
    def update_precision(self, phi: Tensor) -> None:
        batch, n = phi.t() @ phi, torch.tensor(float(phi.shape[0]), device=phi.device)
        if self._trainer is not None and self.trainer.world_size > 1:  # every rank's batch enters P
            batch, n = (self.trainer.strategy.reduce(t, reduce_op="sum") for t in (batch, n))
        if self.cov_momentum > 0:
            self.precision.mul_(self.cov_momentum).add_((1 - self.cov_momentum) * batch / n)
        else:
            self.precision.add_(batch)

    def feature_covariance(self) -> Tensor:
        """ridge · P⁻¹, recomputed only when P has changed (in-place updates bump its version)."""
        key = (self.precision.data_ptr(), self.precision._version)
        if self._cov_cache is None or self._cov_cache[0] != key:
            p = self.precision.double()
            cov = (self.ridge * torch.cholesky_inverse(torch.linalg.cholesky(p))).to(self.precision.dtype)
            self._cov_cache = (key, cov)
        return self._cov_cache[1]

    def predictive_variance(self, phi: Tensor) -> Tensor:
        """diag(ridge · Φ P⁻¹ Φᵀ), (B,)."""
        return ((phi @ self.feature_covariance()) * phi).sum(-1)

    def on_train_epoch_start(self) -> None:
        super().on_train_epoch_start()
        self.reset_precision()

    # ------------------------------------------------------------------ routine contract
    def training_loss(self, views, y):
        phi = self.features(views)
        logits = self.beta(phi)
        self.update_precision(phi.detach())
        ce = nn.functional.cross_entropy(logits, y)
        return ce + self.l2 * self.beta.weight.pow(2).sum(), {"ce": ce, "acc": (logits.argmax(-1) == y).float().mean()}

    def predict(self, views, present=None):
        phi = self.features(self.impute(views, present))
        logits = mean_field_logits(self.beta(phi), self.predictive_variance(phi), self.mean_field_factor)
        return logits.softmax(-1)[None], dempster_shafer(logits)

    def configure_optimizers(self):
        return make_optimizer(
            self.parameters(), max_epochs=self.trainer.max_epochs if self._trainer else 100, **self.optim_cfg
        )
