"""Post-hoc calibrators for every model (docs/method.md §5.6): ``eval.calibration=temperature|vector|dirichlet|isotonic``.

A :class:`Calibrator` is fitted on the validation rows' mean predictive probabilities (N, K) and their labels
(:meth:`Calibrator.fit`), then maps any probabilities (..., K) to calibrated ones (``calibrator(probs)``). Rows
that are not finite are left out of every fit. log p̄ is clamped at log 1e-12, as
:func:`mnp.eval.metrics.nll` does.

* :class:`TemperatureScaling`: p_T(k) ∝ exp(log p̄(k) / T), one T > 0 minimising the NLL; keeps every arg-max.
* :class:`VectorScaling`: softmax(w ⊙ log p̄ + b), a scale and a bias per class (2K parameters).
* :class:`DirichletScaling`: softmax(W log p̄ + b) with Kull et al. (2019)'s ODIR penalty on W's off-diagonal
  entries and on b.
* :class:`IsotonicCalibration`: one isotonic map per class (one-vs-rest), renormalised.

:class:`mnp.eval.posthoc.PostHoc` fits the run's calibrator and reports its ``cal/`` metrics, with
``calibration/n_rows`` and ``calibration/n_classes``, the validation rows and classes it was fitted on; temperature
scaling needs at least :data:`MIN_ROWS` of two classes, checked before training (:func:`check_fit_rows`).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from mnp.eval import metrics

log = logging.getLogger(__name__)

BOUNDS = (1e-2, 1e2)  # the temperatures searched
MIN_ROWS = 10  # T fitted on 2 rows, or on rows of one class, sat at the edge of the range and raised the ECE (T02, T03)
# Dirichlet scaling's ODIR penalty (Kull et al. 2019, eq. 9) on the mean NLL: lambda on W's off-diagonal entries,
# mu on the intercept, each averaged over its entries. One point of the paper's grid (10^-k), declared rather than
# tuned per run: a run has no second held-out split to tune it on.
ODIR_LAMBDA = 1e-3
ODIR_MU = 1e-3


def check_calibration(value) -> str:
    """``eval.calibration``: one of :data:`CALIBRATIONS`, else a ValueError naming the key."""
    if value != "none" and value not in CALIBRATORS:
        raise ValueError(f"eval.calibration must be one of none, {', '.join(CALIBRATORS)}, got {value!r}")
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


def check_fit_rows(labels, run: str | None = None) -> tuple[int, int]:
    """The validation rows and classes T is fitted on, ``(n_rows, n_classes)``; a one-line ValueError with the
    counts and what to do when there are fewer than :data:`MIN_ROWS` rows or one class (``run``: evaluate.py's
    checkpoint, whose run must be trained again: evaluate.py takes no dataset key)."""
    y = np.asarray(labels)
    n, k = len(y), len(np.unique(y))
    if n >= MIN_ROWS and k >= 2:
        return n, k
    rows = f"{n} validation row{'s' * (n != 1)} of {k} class{'es' * (k != 1)}" if n else "no validation rows"
    need = f"T needs at least {MIN_ROWS} rows of 2 or more classes"
    fraction = "a larger dataset.val_fraction" if n else "dataset.val_fraction > 0"
    if run:
        raise ValueError(
            f"+eval.calibration=temperature fits T on the run's validation rows, and the run of {run} has {rows} "
            f"({need}): re-train it with {fraction} (train.py) to calibrate it"
        )
    raise ValueError(
        f"eval.calibration=temperature fits T on the validation rows, and the data give {rows} ({need}): set {fraction}"
    )


class Calibrator:
    """A post-hoc map of probabilities: :meth:`fit` on validation rows, then ``calibrator(probs)``.

    ``keeps_argmax``: whether the map keeps every row's arg-max (then accuracy is not reported again);
    :meth:`min_rows`: the validation rows its fit needs for K classes (its parameters that no penalty holds);
    :meth:`params`: scalars for metrics.json."""

    name = ""
    keeps_argmax = False

    def fit(self, probs: Tensor, labels: Tensor) -> Calibrator:
        raise NotImplementedError

    def __call__(self, probs: Tensor) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def min_rows(num_classes: int) -> int:
        return 1

    def refusal(self, labels: np.ndarray, num_classes: int) -> str | None:
        """Why the fit cannot be made on validation rows of these labels (one class, fewer rows than
        :meth:`min_rows`), None if it can: checked from the labels alone, before anything is predicted."""
        classes = np.unique(labels)
        if len(classes) < 2:
            return f"all {len(labels)} rows are of class {int(classes[0])}"
        if len(labels) < (need := self.min_rows(num_classes)):
            return f"it needs at least {need} rows for {num_classes} classes, there are {len(labels)}"
        return None

    def params(self) -> dict[str, float]:
        return {}


class TemperatureScaling(Calibrator):
    """One temperature T > 0 (:func:`fit_temperature`), searched over [1e-2, 1e2]."""

    name, keeps_argmax = "temperature", True

    @staticmethod
    def min_rows(num_classes: int) -> int:
        return MIN_ROWS

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


class _LinearLogScaling(Calibrator):
    """softmax(W log p̄ + b): W and b minimise the mean NLL plus :meth:`penalty` (L-BFGS from W = I, b = 0, the
    identity map; gradients by autograd in float64)."""

    weight: Tensor
    bias: Tensor

    def _unpack(self, theta: Tensor, k: int) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def _start(self, k: int) -> np.ndarray:
        raise NotImplementedError

    def penalty(self, weight: Tensor, bias: Tensor) -> Tensor:
        return weight.new_zeros(())

    def _logits(self, log_p: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        return (log_p * weight if weight.ndim == 1 else log_p @ weight.T) + bias

    @staticmethod
    def min_rows(num_classes: int) -> int:
        return 2 * num_classes

    def fit(self, probs: Tensor, labels: Tensor) -> _LinearLogScaling:
        from scipy.optimize import minimize

        probs, y = _finite_rows(probs, labels, f"{self.name} scaling")
        k = probs.shape[-1]
        with torch.inference_mode(False):  # the test loop's tensors are inference tensors, which autograd refuses
            log_p, y = _log_probs(probs).clone(), y.clone()

        def loss_and_grad(x: np.ndarray) -> tuple[float, np.ndarray]:
            with torch.inference_mode(False), torch.enable_grad():
                theta = torch.tensor(x, dtype=torch.float64, requires_grad=True)
                w, b = self._unpack(theta, k)
                loss = F.cross_entropy(self._logits(log_p, w, b), y) + self.penalty(w, b)
                loss.backward()
            return loss.item(), theta.grad.numpy()

        fit = minimize(loss_and_grad, self._start(k), jac=True, method="L-BFGS-B", options={"maxiter": 2000})
        if not fit.success:
            log.warning("%s scaling: L-BFGS stopped before converging (%s)", self.name, fit.message)
        self.weight, self.bias = self._unpack(torch.as_tensor(fit.x, dtype=torch.float64), k)
        return self

    def __call__(self, probs: Tensor) -> Tensor:
        return self._logits(_log_probs(probs), self.weight, self.bias).softmax(-1).to(probs.dtype)


class VectorScaling(_LinearLogScaling):
    """softmax(w ⊙ log p̄ + b): a scale and a bias per class (Guo et al. 2017), unregularised."""

    name = "vector"

    def _unpack(self, theta: Tensor, k: int) -> tuple[Tensor, Tensor]:
        return theta[:k], theta[k:]

    def _start(self, k: int) -> np.ndarray:
        return np.concatenate([np.ones(k), np.zeros(k)])


class DirichletScaling(_LinearLogScaling):
    """softmax(W log p̄ + b), W (K, K), with the ODIR penalty λ·mean of W's off-diagonal squares + μ·mean of b's
    squares (Kull et al. 2019); ``lam = mu = 0``: the unregularised maximum-likelihood map. Its fit needs the
    2K rows of vector scaling (the diagonal and the intercept; λ holds the K(K − 1) off-diagonal entries near 0)."""

    name = "dirichlet"

    def __init__(self, lam: float = ODIR_LAMBDA, mu: float = ODIR_MU):
        self.lam, self.mu = float(lam), float(mu)

    def _unpack(self, theta: Tensor, k: int) -> tuple[Tensor, Tensor]:
        return theta[: k * k].reshape(k, k), theta[k * k :]

    def _start(self, k: int) -> np.ndarray:
        return np.concatenate([np.eye(k).ravel(), np.zeros(k)])

    def penalty(self, weight: Tensor, bias: Tensor) -> Tensor:
        k = weight.shape[0]
        off = weight - torch.diag(torch.diagonal(weight))
        return self.lam * off.square().sum() / (k * (k - 1)) + self.mu * bias.square().mean()


class IsotonicCalibration(Calibrator):
    """One isotonic map per class, fitted one-vs-rest on that class's probability (Zadrozny & Elkan 2002; what
    scikit-learn's ``CalibratedClassifierCV(method="isotonic")`` does), then each row renormalised (a row whose
    maps all give 0 becomes uniform). One-vs-rest rather than top-label: the NLL, the Brier score and the conformal
    sets need every class's probability, which a top-label map does not give. Every class needs validation rows."""

    name = "isotonic"

    def fit(self, probs: Tensor, labels: Tensor) -> IsotonicCalibration:
        from sklearn.isotonic import IsotonicRegression

        probs, y = _finite_rows(probs, labels, "isotonic calibration")
        p, y = probs.double().numpy(), y.numpy()
        self.maps = [
            IsotonicRegression(out_of_bounds="clip").fit(p[:, k], (y == k).astype(np.float64))
            for k in range(p.shape[1])
        ]
        return self

    def __call__(self, probs: Tensor) -> Tensor:
        k = len(self.maps)
        p = probs.reshape(-1, k).double().numpy()
        finite = np.isfinite(p).all(1)
        q = np.full_like(p, np.nan)
        q[finite] = np.stack([m.predict(p[finite, c]) for c, m in enumerate(self.maps)], 1)
        total = q.sum(1, keepdims=True)
        q = np.divide(q, total, out=np.full_like(q, 1 / k), where=~finite[:, None] | (total != 0))
        return torch.as_tensor(q).reshape(probs.shape).to(probs.dtype)

    @staticmethod
    def min_rows(num_classes: int) -> int:
        return num_classes

    def refusal(self, labels: np.ndarray, num_classes: int) -> str | None:
        if reason := super().refusal(labels, num_classes):
            return reason
        absent = sorted(set(range(num_classes)) - set(np.unique(labels).tolist()))
        if absent:
            return (
                f"{len(absent)} classes have none of the {len(labels)} rows (class {absent[0]} first), one map a class"
            )
        return None


CALIBRATORS: dict[str, type[Calibrator]] = {
    c.name: c for c in (TemperatureScaling, VectorScaling, DirichletScaling, IsotonicCalibration)
}
