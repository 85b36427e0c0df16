"""Post-hoc temperature scaling for every model (docs/method.md §5.6): ``eval.calibration=temperature``.

After training, one temperature T > 0 is fitted on the validation rows (``dataset.val_fraction > 0``) by the
NLL of the tempered mean predictive probabilities

    p_T(k) ∝ exp(log p̄(k) / T)

(a model's probabilities (S, B, K) are averaged over the samples first, as every metric does; log p̄ is
clamped at log 1e-12, as :func:`mnp.core.metrics.nll` does). NLL is convex in 1/T, so unimodal in log T: a
golden-section search on log T over [1e-2, 1e2] finds its minimum. T is then applied to the test loop's
clean, noisy and missing-view predictions. T > 0 keeps every row's arg-max, so accuracy is unchanged and only
the calibration metrics are reported again, beside the raw ones (whose keys do not change):

* ``calibration/temperature``: T; ``calibration/n_rows``, ``calibration/n_classes``: the validation rows and classes
  it was fitted on (at least :data:`MIN_ROWS` rows of two classes, else the run stops in one line, before training);
* ``cal/test/ece``, ``cal/test/nll``, ``cal/test/brier``;
* ``cal/noise/ece@<σ>``, ``cal/noise/ece_mean``;
* ``cal/missing/ece@v<k>``, ``cal/missing/ece_mean``.

Under ``eval.split=val`` they are ``val/calibration/temperature``, ``val/cal/ece``, ``val/cal/noise/...``, ...
(T is then fitted and scored on the same rows: in-sample, one parameter). The validation rows are predicted
with their own sampling generator, so the raw metrics are the same with calibration on or off; no test row is
read in fitting.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from mnp.core import metrics
from mnp.core.missing import missing_results
from mnp.core.protocols import sigma_key

if TYPE_CHECKING:  # the Routine these helpers serve (no import: routine imports this module)
    import pytorch_lightning as pl

log = logging.getLogger(__name__)

CALIBRATIONS = ("none", "temperature")
BOUNDS = (1e-2, 1e2)  # the temperatures searched
CAL_LOADER = -2_000  # the sample generator index of the validation predictions (see mnp.core.per_view.VIEW_LOADER)
GOLDEN = (math.sqrt(5) - 1) / 2
MIN_ROWS = 10  # T fitted on 2 rows, or on rows of one class, sat at the edge of the range and raised the ECE (T02, T03)


def check_calibration(value) -> str:
    """``eval.calibration``: none or temperature, else a ValueError naming the key."""
    if value not in CALIBRATIONS:
        raise ValueError(f"eval.calibration must be one of {', '.join(CALIBRATIONS)}, got {value!r}")
    return value


def _log_probs(probs: Tensor) -> Tensor:
    return probs.double().clamp_min(metrics.EPS).log()


def temper(probs: Tensor, temperature: float) -> Tensor:
    """Row-wise p_T ∝ exp(log p / T) of probabilities (..., K), in their dtype; T = 1 gives p back (renormalised)."""
    return (_log_probs(probs) / temperature).softmax(-1).to(probs.dtype)


def tempered_nll(log_p: Tensor, labels: Tensor, temperature: float) -> float:
    """Mean NLL of the labels under p_T, from log-probabilities (N, K)."""
    z = log_p / temperature
    return (z.logsumexp(-1) - z.gather(-1, labels[:, None]).squeeze(-1)).mean().item()


def fit_temperature(probs: Tensor, labels: Tensor, bounds: tuple[float, float] = BOUNDS, tol: float = 1e-6) -> float:
    """The T in ``bounds`` that minimises the NLL of p_T on (probs (N, K), labels (N,)): golden-section search on
    log T to a bracket of ``tol`` (relative in T). Rows that are not finite are left out."""
    finite = torch.isfinite(probs).all(-1)
    if not finite.any():
        raise ValueError("temperature scaling: no validation row has finite probabilities to fit T on")
    log_p, y = _log_probs(probs[finite]), labels[finite].long()
    f = lambda log_t: tempered_nll(log_p, y, math.exp(log_t))  # noqa: E731
    a, b = math.log(bounds[0]), math.log(bounds[1])
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = f(d)
    t = math.exp((a + b) / 2)
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


def validation_rows(model: "pl.LightningModule"):
    """The datamodule that holds the validation rows T is fitted on; a one-line ValueError when they are too few
    (checked when the test starts, so ``evaluate.py +eval.calibration=temperature`` fails before predicting)."""
    dm = getattr(model.trainer, "datamodule", None) if model._trainer is not None else None
    check_fit_rows(getattr(dm, "val_y", []))
    return dm


@torch.no_grad()
def validation_predictions(model: "pl.LightningModule") -> tuple[Tensor, Tensor]:
    """Mean probabilities (N, K) and labels of the datamodule's validation rows (``val_views``, ``val_y``) on
    the host, predicted batch by batch (``eval_batch_size``) from the generators of :data:`CAL_LOADER`."""
    from mnp.core.protocols import sample_generator

    dm = validation_rows(model)
    size = int(getattr(dm, "eval_batch_size", 1000))
    probs = []
    for i, start in enumerate(range(0, len(dm.val_y), size)):
        views = [v[start : start + size].to(model.device) for v in dm.val_views]
        model.sample_generator = sample_generator(model.device, model.protocol.sample_seed, CAL_LOADER, i)
        probs.append(model.predict_any(views, f"validation rows, batch {i}: ")[0].mean(0).float().cpu())
    model.sample_generator = None
    return torch.cat(probs), torch.as_tensor(dm.val_y).long().cpu()


def calibrated_results(model: "pl.LightningModule", probs: Tensor, labels: Tensor) -> dict[str, float]:
    """T fitted on the validation rows, then the ``cal/`` metrics of the test loop's stores (clean ``probs``,
    ``labels``; the noisy and missing-view stores of ``model``), named as the raw ones are (``eval.split``)."""
    val_probs, val_labels = validation_predictions(model)
    t = fit_temperature(val_probs, val_labels)
    n_bins = model.protocol.n_bins
    out = {
        f"test/{k}": v
        for k, v in metrics.classification_metrics(temper(probs, t), labels, n_bins).items()
        if k != "acc"
    }
    if model.noise_subsets and model._noisy_labels:
        nl = torch.cat(model._noisy_labels)
        eces = []
        for sigma in model.protocol.noise_levels:
            p = temper(torch.cat(model._noisy[sigma], dim=1), t)
            eces.append(metrics.ece(p.reshape(-1, p.shape[-1]), nl.repeat(p.shape[0]), n_bins))
            out[f"noise/ece@{sigma_key(sigma)}"] = eces[-1]
        out["noise/ece_mean"] = float(np.mean(eces))
    if model._missing:
        stores = {s: ([temper(p, t) for p in ps], ys) for s, (ps, ys) in model._missing.items()}
        out.update(
            {
                k: v
                for k, v in missing_results(stores, len(model.view_dims), model.noise_subsets, n_bins).items()
                if "/ece" in k
            }
        )
    log.info("temperature scaling: T = %.4g (fitted on the validation rows)", t)
    n_rows, n_classes = check_fit_rows(val_labels)
    fitted = {"calibration/temperature": t, "calibration/n_rows": n_rows, "calibration/n_classes": n_classes}
    out = {**fitted, **{f"cal/{k}": v for k, v in out.items()}}
    if model.protocol.split == "val":  # val/...: what mnp.tools.select reads
        out = {"val/" + k.replace("cal/test/", "cal/", 1): v for k, v in out.items()}
    return out
