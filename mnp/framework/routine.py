"""One classification routine that owns the metrics and every evaluation loop.

Every model (MNP and all baselines) subclasses :class:`Routine` and provides only

* ``training_loss(views, y) -> (loss, logs)``: the scalar loss and a dict of scalars to log;
* ``predict(views) -> (probs, uncertainty)``: per-sample class probabilities (S, B, K) and an
  uncertainty score (B,), higher meaning more uncertain. A model that handles missing views takes
  ``predict(views, present=None)``: ``present`` (B, M) bool marks the views present in each row, whose
  absent rows arrive zero-filled (:mod:`mnp.eval.missing`).

Test dataloader 0 is the clean test set, also run through the noise and missing-view protocols (docs/method.md §5);
further ones are OOD sets of ``(views, is_ood)``, named by the datamodule's ``ood_names``. Results land in
``self.test_results`` (scalars) and ``self.test_arrays`` (numpy arrays for predictions.npz).
"""

from __future__ import annotations

import inspect
import logging
import statistics
import time
from collections.abc import Sequence

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor

from mnp.checks import is_int
from mnp.eval import metrics
from mnp.eval.eval_protocol import EvalProtocol
from mnp.eval.missing import missing_results, present_mask, without
from mnp.eval.per_view import PerView
from mnp.eval.posthoc import PostHoc, TestPredictions, validation_predictions
from mnp.eval.protocols import (
    add_noise,
    noise_generator,
    noise_results,
    noisy_copies,
    predict_in_chunks,
    resolve_noise_batch_rows,
    sample_generator,
    sigma_key,
    validation_names,
)
from mnp.eval.rng import rng_states, set_rng_states
from mnp.framework.probabilities import Probabilities

log = logging.getLogger(__name__)


class Routine(pl.LightningModule):
    """Base LightningModule: training step, validation, clean/noisy/OOD test loops and timing."""

    def __init__(self, num_classes: int, view_dims: Sequence[int]):
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        if not view_dims or any(int(d) < 1 for d in view_dims):
            raise ValueError(f"every view needs at least one feature column, got view_dims={list(view_dims)}")
        self.num_classes = int(num_classes)
        self.view_dims = [int(d) for d in view_dims]
        self.configure_evaluation()
        self.sample_generator: torch.Generator | None = None  # what predict samples from in the test loops
        self.epoch_times: list[float] = []
        self.check_finite_every = 1  # loss NaN/inf check period in steps (0 = off); costs one sync
        self._epoch_start: float | None = None

    # ------------------------------------------------------------------ model contract
    def training_loss(self, views: list[Tensor], y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        raise NotImplementedError

    def predict(self, views: list[Tensor], present: Tensor | None = None) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def view_predictions(self, views: list[Tensor]) -> list[Tensor] | None:
        """Each view's own prediction, M × (S, B, K), for the ``view/`` metrics (:mod:`mnp.eval.per_view`); None: none."""
        return None

    @property
    def accepts_missing(self) -> bool:
        """Whether this model's ``predict`` takes the ``present`` mask (models written without it do not)."""
        return "present" in inspect.signature(self.predict).parameters

    def predict_any(self, views: Sequence[Tensor], where: str = "") -> tuple[Tensor, Tensor]:
        """``predict`` on views that may miss rows (all NaN in a view): the mask derived, those rows zero-filled."""
        views, present = present_mask(views, self.view_dims, where)
        if present is None:
            return self.predict(views)
        self.check_accepts_missing()
        return self.predict(views, present)

    def _stop_if_terminated(self) -> None:
        """Stop the test at a SIGTERM, before each predict call of its protocols (Lightning checks between batches)."""
        if self._trainer is not None and getattr(self.trainer, "received_sigterm", False):
            from pytorch_lightning.utilities.exceptions import SIGTERMException

            raise SIGTERMException()

    def _predict_or_stop(self, views: Sequence[Tensor], where: str = "") -> tuple[Tensor, Tensor]:
        self._stop_if_terminated()
        return self.predict_any(views, where)

    def check_accepts_missing(self) -> None:
        if not self.accepts_missing:
            raise ValueError(f"{type(self).__name__} cannot predict with missing views: its predict takes no `present`")

    def ood_logits(self, views: list[Tensor]) -> Tensor | None:
        """(B, K) logits for the energy OOD score, from a model that has them; None (the default): no energy score."""
        return None

    def extra_scores(self, probs: Tensor) -> dict[str, Tensor]:
        """Extra uncertainty scores reported alongside the default one (name -> (B,))."""
        return {"entropy": metrics.entropy(probs.mean(0))}

    # ------------------------------------------------------------------ configuration
    def configure_evaluation(self, protocol: EvalProtocol = EvalProtocol()) -> None:  # noqa: B008 - frozen, so shared
        """Set the evaluation protocol (docs/method.md §5; :class:`~mnp.eval.eval_protocol.EvalProtocol`, which the
        pipeline builds from ``cfg.eval`` and the run's seed) and the view subsets it noises and removes for this
        model's views."""
        self.protocol = protocol
        self.noise_subsets = protocol.subsets(len(self.view_dims))
        self.missing_sets = protocol.removals(len(self.view_dims))

    def check_views(self, views: Sequence[Tensor]) -> None:
        """Fail with one clear line when a batch disagrees with the model's views."""
        dims = [int(v.shape[-1]) for v in views]
        if dims != self.view_dims:
            raise ValueError(f"the data has view dims {dims} but the model was built for {self.view_dims}")

    # ------------------------------------------------------------------ training
    def training_step(self, batch, batch_idx):
        views, y = batch
        loss, logs = self.training_loss(views, y)
        if self.check_finite_every and self.global_step % self.check_finite_every == 0 and not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite training loss ({loss.item()}) at epoch {self.current_epoch}, "
                f"global step {self.global_step}; the last good checkpoint is kept"
            )
        bs = y.shape[0]
        self.log("train/loss", loss, prog_bar=True, on_step=False, on_epoch=True, batch_size=bs)
        for k, v in logs.items():
            self.log(f"train/{k}", v, on_step=False, on_epoch=True, batch_size=bs)
        return loss

    def on_train_epoch_start(self) -> None:
        self._epoch_start = time.perf_counter()

    def close_epoch_timer(self) -> None:
        """Record this epoch's wall time once (callbacks saving checkpoints call it first)."""
        if self._epoch_start is None:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.epoch_times.append(time.perf_counter() - self._epoch_start)
        self._epoch_start = None

    def on_train_epoch_end(self) -> None:
        self.close_epoch_timer()
        if self.epoch_times:
            self.log("time/epoch_s", self.epoch_times[-1])

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["epoch_times"] = list(self.epoch_times)
        checkpoint["rng_states"] = rng_states()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.epoch_times = list(checkpoint.get("epoch_times", []))
        if "rng_states" in checkpoint:
            set_rng_states(checkpoint["rng_states"])

    # ------------------------------------------------------------------ validation
    def validation_step(self, batch, batch_idx):
        views, y = batch
        probs, _ = self.predict(views)
        p = probs.mean(0)
        self.log("val/acc", metrics.correct(p, y).float().mean(), prog_bar=True, batch_size=y.shape[0])
        self.log("val/nll", -p.gather(-1, y[:, None]).clamp_min(1e-12).log().mean(), batch_size=y.shape[0])

    # ------------------------------------------------------------------ test
    def on_test_epoch_start(self) -> None:
        self._clean: dict[str, list[Tensor]] = {"probs": [], "labels": [], "unc": []}
        self._extra: dict[str, list[Tensor]] = {}
        self._noisy: dict[float, list[Tensor]] = {s: [] for s in self.protocol.noise_levels}
        self._noisy_labels: list[Tensor] = []
        self._ood: dict[int, dict[str, list[Tensor]]] = {}
        self._test_time, self._eval_start = 0.0, time.perf_counter()
        if self.missing_sets and not self.accepts_missing:
            log.info("%s: no missing-view protocol, its predict takes no `present` mask", type(self).__name__)
        self._missing = {s: ([], []) for s in self.missing_sets} if self.accepts_missing else {}
        self._per_view = PerView(self) if self.protocol.per_view else None
        self.posthoc = PostHoc(self.protocol, self.num_classes, len(self.view_dims), self.noise_subsets)
        if self.posthoc.active:
            self.posthoc.check(self.trainer.datamodule)  # none: one line before the test loop runs

    def _timed_predict(self, views: list[Tensor], where: str) -> tuple[Tensor, Tensor]:
        sync = self.device.type == "cuda"
        if sync:
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        out = self._predict_or_stop(views, where)
        if sync:
            torch.cuda.synchronize(self.device)
        self._test_time += time.perf_counter() - t0
        return out

    def test_step(self, batch, batch_idx, dataloader_idx: int = 0):
        views, target = batch
        self.sample_generator = sample_generator(self.device, self.protocol.sample_seed, dataloader_idx, batch_idx)
        where = f"test set {dataloader_idx}, batch {batch_idx}: "
        if dataloader_idx == 0:
            self.check_views(views)
            probs, unc = self._timed_predict(views, where)
            self._clean["probs"].append(probs.mean(0).float().cpu())
            self._clean["labels"].append(target.cpu())
            self._clean["unc"].append(unc.float().cpu())
            for name, score in self.extra_scores(probs).items():
                self._extra.setdefault(name, []).append(score.float().cpu())
            if self.noise_subsets:
                self._noise_step(views, target, batch_idx)
            if self._missing:
                self._missing_step(views, target, batch_idx)
            if self._per_view is not None and self._per_view.active:
                self._per_view.step(views, target, batch_idx)
        else:
            probs, unc = self._predict_or_stop(views, where)
            store = self._ood.setdefault(dataloader_idx, {"unc": [], "is_ood": [], "probs": []})
            store["unc"].append(unc.float().cpu())
            store["is_ood"].append(target.cpu())
            store["probs"].append(probs.mean(0).float().cpu())
            if (logits := self.ood_logits(views)) is not None:
                store.setdefault("logits", []).append(logits.float().cpu())

    def _noise_step(self, views: list[Tensor], target: Tensor, batch_idx: int) -> None:
        """Each (σ, subset) noised copy's predictions (docs/method.md §5.1), ``eval.noise_batch_rows`` rows a call."""
        ev = self.protocol
        self._noisy_labels.append(target.cpu())
        g = noise_generator(self.device, ev.noise_seed, batch_idx)
        if rows := resolve_noise_batch_rows(ev.noise_batch_rows, self.device):
            copies = noisy_copies(views, self.noise_subsets, ev.noise_levels, g)
            p = predict_in_chunks(self._predict_or_stop, copies, rows)
            per_sigma = p.view(len(ev.noise_levels), len(self.noise_subsets), views[0].shape[0], -1).unbind(0)
        else:
            per_sigma = [
                torch.stack(
                    [
                        self._predict_or_stop(add_noise(views, s, sigma, g))[0].mean(0).float().cpu()
                        for s in self.noise_subsets
                    ]
                )
                for sigma in ev.noise_levels
            ]
        for sigma, per_subset in zip(ev.noise_levels, per_sigma):
            self._noisy[sigma].append(per_subset)  # (n_subsets, B, K)

    def _missing_step(self, views: list[Tensor], target: Tensor, batch_idx: int) -> None:
        """Each removal set's predictions, from its own generator; rows it leaves with no view are skipped."""
        views, present = present_mask(views, self.view_dims)
        self.removing_views = True  # an early-fusion model's imputation warning is about the data's own missing views
        try:
            for i, removed in enumerate(self.missing_sets):
                self._stop_if_terminated()
                kept, mask = without(views, present, removed)
                y = target
                if present is not None:
                    rows = mask.any(1)
                    kept, mask, y = [v[rows] for v in kept], mask[rows], target[rows]
                self.sample_generator = sample_generator(self.device, self.protocol.sample_seed, -(i + 1), batch_idx)
                probs = (
                    self.predict(kept, mask)[0].mean(0).float().cpu() if len(y) else torch.zeros(0, self.num_classes)
                )
                self._missing[removed][0].append(probs)
                self._missing[removed][1].append(y.cpu())
        finally:
            self.removing_views = False

    def _ood_names(self) -> list[str]:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        return list(getattr(dm, "ood_names", []) or [])

    def on_test_epoch_end(self) -> None:
        self.sample_generator = None  # validation and training draw from the global RNG, as before
        probs = torch.cat(self._clean["probs"])
        labels = torch.cat(self._clean["labels"])
        unc = torch.cat(self._clean["unc"])
        ev = self.protocol
        results: dict[str, float] = {
            f"test/{k}": v for k, v in metrics.classification_metrics(probs, labels, ev.n_bins).items()
        }
        results.update({f"test/{k}": v for k, v in metrics.selective_metrics(probs, labels, unc, ev.n_bins).items()})
        metrics.count_nonfinite(results, "test/nonfinite_rows", probs, "test rows", type(self).__name__)
        arrays: dict[str, np.ndarray] = {
            "test/probs": probs.numpy(),
            "test/labels": labels.numpy(),
            "test/uncertainty": unc.numpy(),
        }
        for name, parts in self._extra.items():
            arrays[f"test/score_{name}"] = torch.cat(parts).numpy()
        if self.noise_subsets and self._noisy_labels:
            nl = torch.cat(self._noisy_labels)
            for sigma in ev.noise_levels:
                metrics.count_nonfinite(
                    results,
                    f"noise/nonfinite_rows@{sigma_key(sigma)}",
                    torch.cat(self._noisy[sigma], dim=1).flatten(0, 1),
                    f"noised test rows at sigma {sigma_key(sigma)}",
                    type(self).__name__,
                )
            noisy, noisy_arrays = noise_results(self._noisy, nl, ev.noise_levels, ev.n_bins)
            results.update({**noisy, "noise/n_subsets": len(self.noise_subsets)})
            arrays.update(noisy_arrays)
        if self._missing:
            results.update(missing_results(self._missing, len(self.view_dims), self.noise_subsets, ev.n_bins))
            for removed, (parts, _) in self._missing.items():
                name = "+".join(f"v{k}" for k in removed)
                metrics.count_nonfinite(
                    results,
                    f"missing/nonfinite_rows@{name}",
                    torch.cat(parts),
                    f"test rows without {name}",
                    type(self).__name__,
                )
        if self._per_view is not None:
            view_results, view_arrays = self._per_view.results()
            results.update(view_results)
            arrays.update(view_arrays)
        names = self._ood_names()
        for idx, store in sorted(self._ood.items()):
            ood, ood_arrays = metrics.ood_results(names[idx - 1] if idx - 1 < len(names) else f"ood{idx}", store)
            results.update(ood)
            arrays.update(ood_arrays)
        results["time/test_s"] = self._test_time
        if self.epoch_times:  # MNP times its main epochs only
            results["time/train_epoch_s"] = float(statistics.median(self.epoch_times))
            results["time/train_epochs"] = len(self.epoch_times)
        if ev.split == "val":
            results, arrays = validation_names(results), validation_names(arrays)
        if self.posthoc.active:  # the validation rows predicted after the test rows, as before the stage existed
            self.posthoc.fit(*validation_predictions(self, self.trainer.datamodule))
            stores = TestPredictions.of(probs, labels, self._noisy, self._noisy_labels, self._missing)
            results.update(self.posthoc.results(stores))
            arrays.update(self.posthoc.arrays())
        results["time/eval_s"] = time.perf_counter() - self._eval_start  # the whole test: every protocol, T's fit
        self._stop_if_terminated()  # a SIGTERM in the epoch-end stages (the post-hoc fits, last per-view step)
        self.test_results, self.test_arrays = results, arrays
        for k, v in results.items():
            if not isinstance(v, str):  # calibration/method is metrics.json's, not a logged scalar
                self.log(k, v, add_dataloader_idx=False)

    # ------------------------------------------------------------------ inference helper
    def predict_proba(self, views, batch_size: int = 1000, seed: int | None = None, return_uncertainty: bool = False):
        """:meth:`predict_tensors` as scikit-learn's: the (N, K) array (``return_uncertainty``: also the (N,) one)."""
        probs, unc = self.predict_tensors(views, batch_size, seed)
        return (probs.numpy(), unc.numpy()) if return_uncertainty else probs.numpy().view(Probabilities)

    @torch.no_grad()
    def predict_tensors(
        self, views: Sequence[Tensor | None], batch_size: int = 1000, seed: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """Mean predictive probabilities (N, K) and uncertainty (N,) for in-memory views, as tensors.

        A view given as None is missing in every row, a row all NaN in a view is missing there; fusion models combine
        the views present, early-fusion ones impute the training means. ``seed``: batch i samples from the test
        loop's generator of that batch (:func:`sample_generator`), so
        with the run's seed and ``dataset.eval_batch_size`` the run's test rows give its test predictions
        exactly; None: the global RNG.
        A ValueError says what is wrong with the arguments (rows, shapes, an infinite value, ``batch_size``)."""
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1 (rows per predict call), got {batch_size!r}")
        was_training = self.training
        self.eval()
        views = [None if v is None else torch.as_tensor(v, dtype=torch.float32) for v in views]
        views, present = present_mask(views, self.view_dims)
        if views[0].shape[0] == 0:
            raise ValueError("the views have 0 rows: there is nothing to predict")
        self.check_views(views)
        for k, v in enumerate(views):  # MNP's sparsemax failed on one, the other models returned a NaN row silently
            if (inf := torch.isinf(v)).any():
                r, c = (int(i) for i in inf.nonzero()[0])
                raise ValueError(
                    f"views[{k}] row {r} holds {float(v[r, c])} in column {c}: a model cannot predict "
                    "from an infinite value; clip it, or give the row as NaN (a missing view)"
                )
        if present is not None:
            self.check_accepts_missing()
        out_p, out_u = [], []
        for i in range(0, views[0].shape[0], batch_size):
            batch = [v[i : i + batch_size].to(self.device) for v in views]
            if seed is not None:
                self.sample_generator = sample_generator(self.device, seed, 0, i // batch_size)
            probs, unc = (
                self.predict(batch)
                if present is None
                else self.predict(batch, present[i : i + batch_size].to(self.device))
            )
            out_p.append(probs.mean(0).cpu())
            out_u.append(unc.cpu())
        self.sample_generator = None
        self.train(was_training)
        return torch.cat(out_p), torch.cat(out_u)
