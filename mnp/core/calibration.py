"""Post-hoc calibrators for every model (docs/method.md §5.6): ``eval.calibration=temperature|vector|dirichlet|isotonic``.

A :class:`Calibrator` is fitted on the validation rows' mean predictive probabilities (N, K) and their labels
(:meth:`Calibrator.fit`), then maps any probabilities (..., K) to calibrated ones (``calibrator(probs)``). Rows
that are not finite are left out of every fit. log p̄ is clamped at log 1e-12, as
:func:`mnp.core.metrics.nll` does.

* :class:`TemperatureScaling`: p_T(k) ∝ exp(log p̄(k) / T), one T > 0 minimising the NLL; keeps every arg-max.
* :class:`VectorScaling`: softmax(w ⊙ log p̄ + b), a scale and a bias per class (2K parameters).
* :class:`DirichletScaling`: softmax(W log p̄ + b) with Kull et al. (2019)'s ODIR penalty on W's off-diagonal
  entries and on b.
* :class:`IsotonicCalibration`: one isotonic map per class (one-vs-rest), renormalised.

:class:`mnp.core.posthoc.PostHoc` fits the run's calibrator and reports its ``cal/`` metrics.
"""

from __future__ import annotations

import logging
import math

import torch
from torch import Tensor

from mnp.core import metrics

log = logging.getLogger(__name__)

CALIBRATIONS = ("none", "temperature", "vector", "dirichlet", "isotonic")
BOUNDS = (1e-2, 1e2)  # the temperatures searched
# Dirichlet scaling's ODIR penalty (Kull et al. 2019, eq. 9) on the mean NLL: lambda on W's off-diagonal entries,
# mu on the intercept, each averaged over its entries. One point of the paper's grid (10^-k), declared rather than
# tuned per run: a run has no second held-out split to tune it on.
ODIR_LAMBDA = 1e-3
ODIR_MU = 1e-3


def check_calibration(value) -> str:
    """``eval.calibration``: one of :data:`CALIBRATIONS`, else a ValueError naming the key."""
    if value not in CALIBRATIONS:
        raise ValueError(f"eval.calibration must be one of {', '.join(CALIBRATIONS)}, got {value!r}")
    return value


def _log_probs(probs: Tensor) -> Tensor:
    return probs.double().clamp_min(metrics.EPS).log()


def _finite_rows(probs: Tensor, labels: Tensor, name: str) -> tuple[Tensor, Tensor]:
    finite = torch.isfinite(probs).all(-1)
    if not finite.any():
        raise ValueError(f"{name}: no validation row has finite probabilities to fit on")
    return probs[finite], torch.as_tensor(labels)[finite].long()


def temper(probs: Tensor, temperature: float) -> Tensor:
    """Row-wise p_T ∝ exp(log p / T) of probabilities (..., K), in their dtype; T = 1 gives p back (renormalised)."""
    return (_log_probs(probs) / temperature).softmax(-1).to(probs.dtype)


def tempered_nll(log_p: Tensor, labels: Tensor, temperature: float) -> float:
    """Mean NLL of the labels under p_T, from log-probabilities (N, K)."""
    z = log_p / temperature
    return (z.logsumexp(-1) - z.gather(-1, labels[:, None]).squeeze(-1)).mean().item()


def fit_temperature(probs: Tensor, labels: Tensor, bounds: tuple[float, float] = BOUNDS) -> float:
    """The T in ``bounds`` that minimises the NLL of p_T on (probs (N, K), labels (N,)). The NLL is convex in
    1/T, so unimodal in log T: scipy's bounded Brent search on log T. Its tolerance, 1e-7 in log T, is below the
    1e-6 bracket of the golden-section loop it replaced, so T moved by less than 1e-6 relative (the ``cal/``
    numbers of earlier runs by far less than their printed digits). Rows that are not finite are left out."""
    from scipy.optimize import minimize_scalar

    probs, y = _finite_rows(probs, labels, "temperature scaling")
    log_p = _log_probs(probs)
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    fit = minimize_scalar(
        lambda log_t: tempered_nll(log_p, y, math.exp(log_t)),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-7},
    )
    t = math.exp(fit.x)
    if min(abs(math.log(t / bounds[0])), abs(math.log(t / bounds[1]))) < 1e-3:
        log.warning("temperature scaling: T = %.4g is at the edge of the search range %s", t, bounds)
    return t


class Calibrator:
    """A post-hoc map of probabilities: :meth:`fit` on validation rows, then ``calibrator(probs)``.

    ``keeps_argmax``: whether the map keeps every row's arg-max (then accuracy is not reported again);
    :meth:`min_rows`: the validation rows its fit needs for K classes; :meth:`params`: scalars for metrics.json."""

    name = ""
    keeps_argmax = False

    def fit(self, probs: Tensor, labels: Tensor) -> Calibrator:
        raise NotImplementedError

    def __call__(self, probs: Tensor) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def min_rows(num_classes: int) -> int:
        return 1

    def params(self) -> dict[str, float]:
        return {}


class TemperatureScaling(Calibrator):
    """One temperature T > 0 (:func:`fit_temperature`), searched over [1e-2, 1e2]."""

    name, keeps_argmax = "temperature", True

    def __init__(self, temperature: float = 1.0):
        self.temperature = float(temperature)

    def fit(self, probs: Tensor, labels: Tensor) -> TemperatureScaling:
        self.temperature = fit_temperature(probs, labels)
        log.info("temperature scaling: T = %.4g (fitted on the validation rows)", self.temperature)
        return self

    def __call__(self, probs: Tensor) -> Tensor:
        return temper(probs, self.temperature)

    def params(self) -> dict[str, float]:
        return {"temperature": self.temperature}
