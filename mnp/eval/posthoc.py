"""The post-hoc stage of the test loop (docs/method.md §5.6, §5.7): a calibrator (``eval.calibration``) fitted on
the validation rows after training, then conformal sets (``eval.conformal``) calibrated on the same rows' calibrated
probabilities, both applied to the test loop's clean, noisy and missing-view predictions.

The routine hands the stage its inputs explicitly: the datamodule's validation rows through the declared
:class:`ValidationRows` interface (``val_views``, ``val_y``, ``eval_batch_size``), predicted by
:func:`validation_predictions`, and the test loop's predictions as :class:`TestPredictions`. The validation rows
are predicted with their own sampling generator (:data:`CAL_LOADER`), so the raw metrics are the same with the
stage on or off; no test row is read in fitting.

Metrics, beside the raw ones (whose keys do not change):

* ``calibration/method``, and the calibrator's parameters (``calibration/temperature``: T);
* ``cal/test/ece``, ``cal/test/nll``, ``cal/test/brier`` (and ``cal/test/acc`` for a map that may change the
  arg-max); ``cal/noise/ece@<σ>``, ``cal/noise/ece_mean``; ``cal/missing/ece@v<k>``, ``cal/missing/ece_mean``.

* ``conformal/...``: :meth:`PostHoc._conformal` (coverage and set size, clean, per σ, each view missing).

Under ``eval.split=val`` they are ``val/calibration/...``, ``val/cal/ece``, ``val/cal/noise/...``, ... (the map
is then fitted and scored on the same rows: in-sample).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from mnp.eval import metrics
from mnp.eval.calibration import CALIBRATORS, Calibrator
from mnp.eval.conformal import SplitConformal, min_rows, set_metrics
from mnp.eval.missing import missing_results
from mnp.eval.protocols import sample_generator, sigma_key

if TYPE_CHECKING:  # the Routine this stage serves (no import: routine imports this module)
    import pytorch_lightning as pl

    from mnp.eval.eval_protocol import EvalProtocol

log = logging.getLogger(__name__)

CAL_LOADER = -2_000  # the sample generator index of the validation predictions (see mnp.eval.per_view.VIEW_LOADER)


@runtime_checkable
class ValidationRows(Protocol):
    """What the post-hoc stage reads of a datamodule (:class:`datamodules.base.MultiViewDataModule` has it): the
    scaled validation views, their labels and the evaluation batch size."""

    val_views: list[Tensor]
    val_y: Tensor
    eval_batch_size: int


def validation_need(ev: Mapping) -> str | None:
    """Why an ``eval`` node needs validation rows (the first post-hoc setting that does), None if it does not: the
    one statement of the rule, for the config check before training and for the test's start."""
    cal = ev.get("calibration", "none")
    if cal == "temperature":
        return "eval.calibration=temperature fits T on the validation rows"
    if cal not in (None, "none"):
        return f"eval.calibration={cal} fits its map on the validation rows"
    if (conf := ev.get("conformal", "none")) not in (None, "none"):
        return f"eval.conformal={conf} calibrates its sets on the validation rows"
    return None


@dataclass
class TestPredictions:
    """The test loop's mean probabilities: ``probs`` (N, K) and ``labels`` of the clean rows; ``noisy`` σ ->
    (n_subsets, N, K) with ``noisy_labels`` (N,); ``missing``: removed views -> (probs batches, labels batches)."""

    probs: Tensor
    labels: Tensor
    noisy: dict[float, Tensor] = field(default_factory=dict)
    noisy_labels: Tensor | None = None
    missing: dict = field(default_factory=dict)

    @classmethod
    def of(cls, probs: Tensor, labels: Tensor, noisy: dict, noisy_labels: list, missing: dict) -> TestPredictions:
        """From the routine's stores: each σ's list of (n_subsets, B, K) batches, the noisy labels' batches (empty:
        no noise protocol) and the missing-view stores."""
        if not noisy_labels:
            return cls(probs, labels, missing=missing)
        return cls(probs, labels, {s: torch.cat(p, dim=1) for s, p in noisy.items()}, torch.cat(noisy_labels), missing)


@torch.no_grad()
def validation_predictions(model: pl.LightningModule, rows: ValidationRows) -> tuple[Tensor, Tensor]:
    """Mean probabilities (N, K) and labels of the validation rows on the host, predicted batch by batch
    (``eval_batch_size``) from the generators of :data:`CAL_LOADER`."""
    size, probs = int(rows.eval_batch_size), []
    for i, start in enumerate(range(0, len(rows.val_y), size)):
        views = [v[start : start + size].to(model.device) for v in rows.val_views]
        model.sample_generator = sample_generator(model.device, model.protocol.sample_seed, CAL_LOADER, i)
        probs.append(model.predict_any(views, f"validation rows, batch {i}: ")[0].mean(0).float().cpu())
    model.sample_generator = None
    return torch.cat(probs), torch.as_tensor(rows.val_y).long().cpu()


class PostHoc:
    """The run's post-hoc steps, built from its protocol: :meth:`check` the validation rows when the test starts,
    :meth:`fit` on their predictions, :meth:`results` on the test loop's."""

    def __init__(self, protocol: EvalProtocol, num_classes: int, num_views: int, noise_subsets=()):
        self.protocol, self.num_classes = protocol, num_classes
        self.num_views, self.noise_subsets = num_views, list(noise_subsets)
        cal, conf = protocol.calibration, protocol.conformal
        self.calibrator: Calibrator | None = CALIBRATORS[cal]() if cal != "none" else None
        self.conformal = None
        if conf != "none":
            ev = protocol
            self.conformal = SplitConformal(conf, ev.conformal_alpha, ev.raps_lambda, ev.raps_k_reg, ev.sample_seed)
        self.need = validation_need({"calibration": cal, "conformal": conf})

    @property
    def active(self) -> bool:
        return self.need is not None

    def check(self, rows) -> ValidationRows:
        """The validation rows, or a one-line ValueError saying why the steps cannot be fitted on them (checked
        when the test starts, so ``evaluate.py +eval.calibration=...`` fails before predicting)."""
        if not isinstance(rows, ValidationRows) or len(rows.val_y) == 0:
            raise ValueError(f"{self.need}: set dataset.val_fraction > 0")
        labels = np.asarray(rows.val_y)
        if self.calibrator is not None and (why := self.calibrator.refusal(labels, self.num_classes)):
            raise ValueError(
                f"eval.calibration={self.calibrator.name} cannot be fitted on the validation rows: {why}; "
                "set a larger dataset.val_fraction"
            )
        ev = self.protocol
        if self.conformal is not None and len(labels) < (need := min_rows(ev.conformal_alpha)):
            raise ValueError(
                f"eval.conformal={ev.conformal} at eval.conformal_alpha={ev.conformal_alpha:g} needs at least {need} "
                f"validation rows, there are {len(labels)}: set a larger dataset.val_fraction or eval.conformal_alpha"
            )
        return rows

    def fit(self, probs: Tensor, labels: Tensor) -> PostHoc:
        """Fit the calibrator on the validation rows' probabilities (N, K) and labels, then the conformal sets on
        the calibrated probabilities."""
        self.val_probs, self.val_labels = probs, labels
        if self.calibrator is not None:
            self.calibrator.fit(probs, labels)
        if self.conformal is not None:
            self.conformal.fit(self.calibrate(probs), labels)
        return self

    def calibrate(self, probs: Tensor) -> Tensor:
        return probs if self.calibrator is None else self.calibrator(probs)

    def sets(self, probs: Tensor, alpha: float | None = None, stream: int = 1) -> Tensor:
        """Boolean conformal sets (..., K) of raw probabilities (calibrated first), at the run's alpha or ``alpha``."""
        return self.conformal(self.calibrate(probs), stream, alpha)

    def arrays(self) -> dict[str, np.ndarray]:
        """For predictions.npz: the validation rows' raw probabilities and labels, which :meth:`from_run` refits."""
        return {"posthoc/val_probs": self.val_probs.numpy(), "posthoc/val_labels": self.val_labels.numpy()}

    @classmethod
    def from_run(cls, run_eval, seed: int, predictions: Path) -> PostHoc:
        """The stage of a finished run, refitted from the validation predictions its ``predictions.npz`` stored
        (the fits are deterministic, the draws seeded: the run's own steps)."""
        from mnp.eval.eval_protocol import EvalProtocol

        protocol = EvalProtocol.from_config(run_eval, seed)
        if protocol.conformal == "none":
            raise ValueError(
                "this run has no conformal sets (eval.conformal=none): train it with eval.conformal=thr|aps|raps "
                "and dataset.val_fraction > 0"
            )
        stored = np.load(predictions) if predictions.is_file() else {}
        if "posthoc/val_probs" not in stored:
            raise ValueError(f"{predictions} holds no validation predictions (posthoc/val_probs) to fit the sets on")
        probs, labels = torch.as_tensor(stored["posthoc/val_probs"]), torch.as_tensor(stored["posthoc/val_labels"])
        return cls(protocol, probs.shape[-1], 0).fit(probs, labels)

    def results(self, test: TestPredictions) -> dict:
        """The stage's metrics on the test loop's predictions, named for ``eval.split``."""
        out = self._calibrated(test) if self.calibrator is not None else {}
        if self.conformal is not None:
            out.update(self._conformal(test))
        if self.protocol.split == "val":  # val/...: what mnp.tools.select reads
            out = {
                "val/" + k.replace("cal/test/", "cal/", 1).replace("conformal/test/", "conformal/"): v
                for k, v in out.items()
            }
        return out

    def _conformal(self, test: TestPredictions) -> dict:
        """Coverage and size on the clean rows (also by set size), per σ (stream 2 + its index) and with each view
        missing (stream 1000 + k), and the rows counted (``n_cal`` validation, ``n_test`` clean test rows)."""
        ev = self.protocol
        out = {"method": ev.conformal, "alpha": ev.conformal_alpha, "qhat": self.conformal.qhat}
        out.update(n_cal=len(self.val_labels), n_test=len(test.labels))  # the finite-sample tolerance's counts
        out.update({f"test/{k}": v for k, v in set_metrics(self.sets(test.probs), test.labels, strata=True).items()})
        for where, stores in (("noise", self._noisy_stores(test)), ("missing", self._missing_stores(test))):
            if not stores:
                continue
            for name, (stream, probs, labels) in stores.items():
                for k, v in set_metrics(self.sets(probs, stream=stream).reshape(-1, probs.shape[-1]), labels).items():
                    out[f"{where}/{k}@{name}"] = v
            for k in ("coverage", "size"):
                out[f"{where}/{k}_mean"] = float(np.mean([out[f"{where}/{k}@{name}"] for name in stores]))
        return {f"conformal/{k}": v for k, v in out.items()}

    @staticmethod
    def _noisy_stores(test: TestPredictions) -> dict:
        if test.noisy_labels is None:
            return {}
        return {
            sigma_key(s): (2 + i, p, test.noisy_labels.repeat(p.shape[0]))
            for i, (s, p) in enumerate(test.noisy.items())
        }

    def _missing_stores(self, test: TestPredictions) -> dict:
        out = {}
        for k in range(self.num_views):
            if (k,) in test.missing:
                probs, labels = (torch.cat(parts) for parts in test.missing[(k,)])
                out[f"v{k}"] = (1000 + k, probs, labels)
        return out

    def _calibrated(self, test: TestPredictions) -> dict:
        cal, n_bins = self.calibrator, self.protocol.n_bins
        out = {
            f"test/{k}": v
            for k, v in metrics.classification_metrics(cal(test.probs), test.labels, n_bins).items()
            if k != "acc" or not cal.keeps_argmax
        }
        if test.noisy and test.noisy_labels is not None:
            eces = []
            for sigma, p in test.noisy.items():
                p = cal(p)
                eces.append(metrics.ece(p.reshape(-1, p.shape[-1]), test.noisy_labels.repeat(p.shape[0]), n_bins))
                out[f"noise/ece@{sigma_key(sigma)}"] = eces[-1]
            out["noise/ece_mean"] = float(np.mean(eces))
        if test.missing:
            stores = {s: ([cal(p) for p in ps], ys) for s, (ps, ys) in test.missing.items()}
            missing = missing_results(stores, self.num_views, self.noise_subsets, n_bins)
            out.update({k: v for k, v in missing.items() if "/ece" in k})
        params = {f"calibration/{k}": v for k, v in cal.params().items()}
        rows = {"calibration/n_rows": len(self.val_labels), "calibration/n_classes": len(self.val_labels.unique())}
        return {"calibration/method": cal.name, **params, **rows, **{f"cal/{k}": v for k, v in out.items()}}
