"""Multimodal Gaussian Process, MGP (Jung et al. 2022) (docs/method.md §3, paper appendix "MGP"), on gpytorch.

* One sparse variational GP per view (``ViewGP``): K independent latent functions (one per class)
  sharing the view's inducing points and its ARD-RBF kernel, as in the official GPflow code
  (``SVGP(num_latent_gps=C)``). gpytorch's ``VariationalStrategy`` is whitened; the official code
  uses the unwhitened parameterisation of the same model.
* Dirichlet-based GP classification (Milios et al. 2018): one-hot y becomes regression targets
  ỹ = log(y + ε) − s̃²/2 with heteroskedastic noise s̃² = log(1/(y + ε) + 1), fitted with a fixed-noise
  Gaussian likelihood; each view maximises its own ELBO (``VariationalELBO``, KL weight ``kl_beta``).
  ε defaults to the official code's 1e-7; the Dirichlet GP paper's 0.01 gave 91% / ECE 0.09 on
  Handwritten against 98.5% / 0.012 (10 epochs, uniform weights for 0.01: entropy weights break).
* Fusion of the views' latent Gaussians, a weighted product of experts:
  σ² = 1 / Σ_m w_m/σ²_m,  μ = σ² Σ_m w_m μ_m/σ²_m, with weights ``train_weighting`` (uniform) while
  training and ``test_weighting`` (entropy: w_m ∝ the negative differential entropy
  −(½ log(2π σ²_m) + ½), normalised over views as in the official ``combine_dist``) at test.
  The official weights are convex only while every view's σ² lies on the same side of 1/(2πe); elsewhere
  they are taken by magnitude (``entropy_weights``), which leaves them unchanged where they were convex
  (``entropy_signed``: the official h/Σh as it is, with its negative variances and NaN probabilities).
  ``softmax_entropy`` (also official) is always positive. With missing views the product runs over
  the views present, the weights renormalised over them.
* Prediction: ``mc_samples`` softmax samples of the fused Gaussian. Uncertainty ``predictive``
  (official): Σ_k Var[y_k] = Σ_k (p̄_k − p̄_k²), the summed variance of the predictive
  (gpflow's Monte Carlo ``predict_mean_and_var``); ``latent``: Σ_k σ²_k of the fused Gaussian.

Inducing points (trainable) are drawn from the training data (random rows or k-means centres) in
``on_fit_start`` from the datamodule, or in plain Python by ``init_from_data(train_views)``.
The paper's "ten warm-up epochs" are not in the official MGP code and are not reproduced.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gpytorch
import torch
from torch import Tensor

from mnp.framework.domains import COUNT, NON_NEGATIVE, POSITIVE, Domain, check_domains
from mnp.framework.optim import OPTIM_DOMAINS, make_optimizer, optim_settings
from mnp.framework.routine import Routine

WEIGHTINGS = ("uniform", "poe", "entropy", "entropy_signed", "softmax_entropy")


def dirichlet_targets(y: Tensor, num_classes: int, eps: float) -> tuple[Tensor, Tensor]:
    """Transformed labels ỹ and noise s̃², both (B, K) (Milios et al. 2018, eqs. for α = y + ε)."""
    alpha = torch.nn.functional.one_hot(y, num_classes).float() + eps
    s2 = torch.log1p(1.0 / alpha)
    return alpha.log() - 0.5 * s2, s2


def entropy_weights(neg_entropy: Tensor) -> Tensor:
    """The official ``combine_dist`` weights over axis 0, w_m = h_m / Σ_m' h_m with h the negative differential
    entropies, taken as |h_m| / Σ_m' |h_m|.

    h_m = −(½ log(2π σ²_m) + ½) changes sign at σ²_m = 1/(2πe) ≈ 0.0585. Where the views' h share one sign (every
    σ² on the same side) both forms are the same convex weights, bit for bit (|h| = −h exactly). Where they do not,
    the official weights leave [0, 1]: some are negative, and all grow without bound as Σ h → 0, so the fused
    precision Σ w_m/σ²_m can be negative, its variance too, and the Monte Carlo softmax of μ + √σ² ε is NaN
    (iris and breast_cancer of benchmarks/custom_defaults.py: 4 of 30 and 7 of 113 test rows). |h| keeps the
    weights convex and continuous in σ², a view's weight passing through 0 where its h changes sign.
    """
    magnitude = neg_entropy.abs()
    return magnitude / magnitude.sum(0)


def fuse_experts(
    means: Tensor, variances: Tensor, weighting: str, present: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Weighted product of Gaussian experts over axis 0: (M, B, K) -> (B, K) mean and variance; with
    ``present`` (B, M), of the experts present in each row (the weights renormalised over them)."""
    if weighting == "poe":
        w = torch.ones_like(variances)
    elif weighting == "uniform":
        w = torch.full_like(variances, 1.0 / variances.shape[0])
    elif weighting in ("entropy", "entropy_signed", "softmax_entropy"):
        neg_entropy = -(0.5 * torch.log(2 * math.pi * variances) + 0.5)
        if weighting == "entropy":
            w = entropy_weights(neg_entropy)
        elif weighting == "entropy_signed":  # the official combine_dist verbatim: NaN where h changes sign
            w = neg_entropy / neg_entropy.sum(0)
        else:
            w = neg_entropy.softmax(0)
    else:
        raise ValueError(f"unknown weighting '{weighting}'; choose one of {', '.join(WEIGHTINGS)}")
    if present is not None:
        w = w * present.t().unsqueeze(-1).to(w.dtype)
        w = w if weighting == "poe" else w / w.sum(0)
    precision = w / variances
    var = 1.0 / precision.sum(0)
    return var * (precision * means).sum(0), var


def data_lengthscales(x: Tensor) -> Tensor:
    """ARD lengthscales of one view, (d,): the official init_lengthscale_data, std · √d per column.

    A column constant in the training rows gets the median std · √d of the view's varying columns
    (√d if none varies) instead of the official 0 (floored at 1e-3). Neither inputs nor inducing points
    vary there, so the ELBO's gradient for that lengthscale is exactly zero and it keeps its initial
    value: at 1e-3 any test perturbation of the column (σ = 0.01 noise) sends the view's kernel to 0 and
    its posterior to the prior. The median makes the column as relevant as a typical one, so noise on
    it counts like noise on any other column; dropping the column instead would make MGP blind to it,
    unlike the other models. Views without a constant column are unchanged (docs/method.md §3).
    """
    spread = x.std(0) * math.sqrt(x.shape[1])
    varies = x.amax(0) > x.amin(0)
    typical = spread[varies].median() if varies.any() else spread.new_tensor(math.sqrt(x.shape[1]))
    return torch.where(varies, spread.clamp_min(1e-3), typical)


class ViewGP(gpytorch.models.ApproximateGP):
    """K independent SVGPs on one view sharing inducing inputs and an ARD-RBF kernel."""

    def __init__(self, num_inducing: int, dim: int, num_classes: int):
        q = gpytorch.variational.CholeskyVariationalDistribution(num_inducing, batch_shape=torch.Size([num_classes]))
        strategy = gpytorch.variational.VariationalStrategy(
            self, torch.zeros(num_inducing, dim), q, learn_inducing_locations=True
        )
        super().__init__(strategy)
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=dim))

    def forward(self, x: Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


class MGP(Routine):
    OPTIM = {"lr": 0.1, "schedule": "linear", "values": [1e-3]}  # optim's defaults, as conf/model/ states them
    domains = dict(
        num_inducing=COUNT,
        lengthscale_init=Domain(0, low_open=True, words=("data",)),  # mnp.framework.domains
        outputscale_init=POSITIVE,
        alpha_eps=POSITIVE,
        kl_beta=NON_NEGATIVE,
        mc_samples=COUNT,
        optim=OPTIM_DOMAINS,
    )

    def __init__(
        self,
        num_classes: int,
        view_dims: Sequence[int],
        num_inducing: int = 200,
        inducing_init: str = "random",
        lengthscale_init: float | str = "data",
        outputscale_init: float = 1.0,
        alpha_eps: float = 1e-7,
        kl_beta: float = 1.0,
        train_weighting: str = "uniform",
        test_weighting: str = "entropy",
        mc_samples: int = 100,
        uncertainty: str = "predictive",
        optim: dict | None = None,
    ):
        super().__init__(num_classes, view_dims)
        self.save_hyperparameters()
        check_domains(self.domains, self.hparams)
        for w in (train_weighting, test_weighting):
            if w not in WEIGHTINGS:
                raise ValueError(f"unknown weighting '{w}'; choose one of {', '.join(WEIGHTINGS)}")
        if inducing_init not in {"random", "kmeans"}:
            raise ValueError(f"unknown inducing_init '{inducing_init}'; choose random or kmeans")
        if uncertainty not in {"predictive", "latent"}:
            raise ValueError(f"unknown uncertainty '{uncertainty}'; choose predictive or latent")
        self.gps = torch.nn.ModuleList(ViewGP(num_inducing, d, num_classes) for d in self.view_dims)
        self.likelihood = gpytorch.likelihoods.FixedNoiseGaussianLikelihood(noise=torch.ones(1))  # noise per batch
        self.register_buffer("num_data", torch.tensor(0))
        self.num_inducing, self.inducing_init = int(num_inducing), inducing_init
        self.lengthscale_init, self.outputscale_init = lengthscale_init, float(outputscale_init)
        self.alpha_eps, self.kl_beta, self.mc_samples = float(alpha_eps), float(kl_beta), int(mc_samples)
        self.train_weighting, self.test_weighting, self.uncertainty = train_weighting, test_weighting, uncertainty
        self.optim_cfg = optim_settings(self.OPTIM, optim)

    # ------------------------------------------------------------------ initialisation from data
    def _inducing_from(self, x: Tensor) -> Tensor:
        n, m = x.shape[0], self.num_inducing
        if self.inducing_init == "kmeans":
            from sklearn.cluster import KMeans

            seed = int(torch.randint(0, 2**31 - 1, ()).item())
            km = KMeans(n_clusters=min(m, n), n_init=1, random_state=seed).fit(x.double().cpu().numpy())
            centres = torch.as_tensor(km.cluster_centers_, dtype=x.dtype)
            if len(centres) < m:
                centres = torch.cat([centres, x.cpu()[torch.randint(n, (m - len(centres),))]])
            return centres
        idx = torch.randperm(n)[:m] if n >= m else torch.randint(n, (m,))
        return x.cpu()[idx]

    @torch.no_grad()
    def init_from_data(self, train_views: Sequence[Tensor]) -> None:
        """Inducing points from the training rows, kernel initial values and the ELBO's data size."""
        self.check_views(train_views)
        for x, gp in zip(train_views, self.gps):
            x = torch.as_tensor(x, dtype=torch.float32)
            strategy = gp.variational_strategy
            strategy.inducing_points.copy_(self._inducing_from(x).to(strategy.inducing_points))
            if self.lengthscale_init == "data":
                ls = data_lengthscales(x)
            else:
                ls = torch.full((x.shape[1],), float(self.lengthscale_init))
            gp.covar_module.base_kernel.lengthscale = ls.to(strategy.inducing_points)
            gp.covar_module.outputscale = self.outputscale_init
        self.num_data.fill_(int(train_views[0].shape[0]))

    def on_fit_start(self) -> None:
        if int(self.num_data) > 0:  # already initialised (resumed run or init_from_data)
            return
        dm = self.trainer.datamodule
        if dm is None or not hasattr(dm, "train_views"):
            raise ValueError(
                "MGP needs its training data to place inducing points: fit with a datamodule "
                "that has train_views, or call model.init_from_data(train_views) first"
            )
        self.init_from_data(dm.train_views)

    # ------------------------------------------------------------------ posterior per view and fused
    def view_posteriors(self, views: list[Tensor]) -> tuple[Tensor, Tensor]:
        """Latent means and variances of every view, (M, B, K) each."""
        outs = [gp(x) for gp, x in zip(self.gps, views)]
        return torch.stack([f.mean.t() for f in outs]), torch.stack([f.variance.t() for f in outs])

    def training_loss(self, views, y):
        if int(self.num_data) == 0:
            raise RuntimeError("MGP is not initialised: call init_from_data(train_views) or fit with a datamodule")
        targets, noise = dirichlet_targets(y, self.num_classes, self.alpha_eps)
        loss, means, variances = 0.0, [], []
        for gp, x in zip(self.gps, views):
            f = gp(x)
            elbo = gpytorch.mlls.VariationalELBO(self.likelihood, gp, num_data=int(self.num_data), beta=self.kl_beta)
            loss = loss - elbo(f, targets.t(), noise=noise.t()).sum()
            means.append(f.mean.t().detach())
            variances.append(f.variance.t().detach())
        mu, _ = fuse_experts(torch.stack(means), torch.stack(variances), self.train_weighting)
        return loss, {"acc": (mu.argmax(-1) == y).float().mean()}

    def predict(self, views, present=None):
        mu, var = fuse_experts(*self.view_posteriors(views), self.test_weighting, present)
        eps = torch.randn(self.mc_samples, *mu.shape, device=mu.device, dtype=mu.dtype, generator=self.sample_generator)
        probs = (mu + var.sqrt() * eps).softmax(-1)
        if self.uncertainty == "predictive":
            p = probs.mean(0)
            unc = (p - p.pow(2)).sum(-1)
        else:
            unc = var.sum(-1)
        return probs, unc

    def configure_optimizers(self):
        return make_optimizer(
            self.parameters(), max_epochs=self.trainer.max_epochs if self._trainer else 100, **self.optim_cfg
        )
