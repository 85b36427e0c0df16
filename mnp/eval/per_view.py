"""Per-view metrics (docs/method.md §5.5): each view's own unimodal prediction, clean and under the noise protocol.

A model that forms a prediction from each view alone implements ``view_predictions(views) -> list of M
(S, B, K) per-sample probabilities`` (MNP: the decoder applied to each view's unimodal posterior, eq. 8 with
that view's terms only); the base :class:`~mnp.framework.routine.Routine` returns None and no ``view/`` metric is
written. :class:`PerView` runs the hook in the test loop on the clean test rows and on the noise protocol's
noised copies (the same noise as the fused prediction's: :func:`~mnp.eval.protocols.noise_generator`), with
its own sampling generator, so the fused metrics are the same with the per-view metrics on or off.

Keys (``val/view/...`` under ``eval.split=val``):

* ``view/acc@v<k>``, ``view/ece@v<k>``: view k's prediction on the clean rows; ``view/acc_mean``,
  ``view/ece_mean`` their means over the views;
* ``view/acc@v<k>@<σ>``, ``view/ece@v<k>@<σ>``: view k's prediction when view k is noised at σ (pooled over the
  noise subsets that contain k);
* ``view/acc@<σ>``, ``view/ece@<σ>``: their means over the views at each σ (the views some noise subset holds); ``view/noise_acc_mean@v<k>``,
  ``view/noise_ece_mean@v<k>``: view k's means over σ (as ``noise/acc_mean``).

predictions.npz gains ``view/noise_acc`` and ``view/noise_ece``, (M, len(σ)) arrays for the per-σ figure.
A row missing view k (mnp.eval.missing) counts for no view-k metric. Single-view data get no ``view/`` key: the
one view's prediction is the fused one, which the ``test/`` and ``noise/`` metrics already score.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from mnp.eval import metrics
from mnp.eval.missing import present_mask
from mnp.eval.protocols import noise_generator, noisy_copies, predict_in_chunks, resolve_noise_batch_rows, sigma_key

if TYPE_CHECKING:  # the Routine these helpers serve (no import: routine imports this module)
    import pytorch_lightning as pl

# the sample generator index of the per-view predictions (the clean test set is 0, OOD sets 1, 2, ..., the
# missing-view protocol's removal sets -1, -2, ...)
VIEW_LOADER = -1_000


def per_view_flag(value) -> bool:
    """``eval.per_view``: true or false, else a ValueError naming the key."""
    if not isinstance(value, bool):
        raise ValueError(f"eval.per_view must be true or false, got {value!r}")
    return value


class PerView:
    """The test loop's per-view predictions (mean probabilities on the host) and their metrics."""

    def __init__(self, model: pl.LightningModule):
        self.model = model
        m = len(model.view_dims)
        self.active = m > 1  # False once the model's hook returns None; one view's own prediction is the fused one
        self.clean: list[list[tuple[Tensor, Tensor]]] = [[] for _ in range(m)]  # per view: (probs, labels) batches
        self.noisy = {s: [[] for _ in range(m)] for s in model.protocol.noise_levels}

    def _means(self, views: list[Tensor]) -> Tensor | None:
        """(B, M, K) mean probabilities of each view's own prediction; None when the model has none."""
        self.model._stop_if_terminated()
        per = self.model.view_predictions(views)
        if per is None:
            return None
        return torch.stack([p.mean(0) for p in per], 1).float()

    def step(self, views: list[Tensor], target: Tensor, batch_idx: int) -> None:
        """One clean test batch: its per-view predictions, clean and for every (σ, subset) noised copy."""
        from mnp.eval.protocols import sample_generator

        model = self.model
        views, present = present_mask(views, model.view_dims)
        model.sample_generator = sample_generator(model.device, model.protocol.sample_seed, VIEW_LOADER, batch_idx)
        clean = self._means(views)
        if clean is None:
            self.active = False
            return
        clean = clean.cpu()
        rows = [slice(None) if present is None else present[:, k].cpu() for k in range(len(views))]
        y = target.cpu()
        for k, r in enumerate(rows):
            self.clean[k].append((clean[:, k][r], y[r]))
        ev, subsets = model.protocol, model.noise_subsets
        if not subsets:
            return
        levels = ev.noise_levels
        g = noise_generator(model.device, ev.noise_seed, batch_idx)  # the fused protocol's noise, draw for draw
        copies = noisy_copies(views, subsets, levels, g)
        if n_rows := resolve_noise_batch_rows(ev.noise_batch_rows, model.device):
            flat = predict_in_chunks(lambda vs: (self._means(vs).flatten(1)[None], None), copies, n_rows)
        else:
            flat = torch.cat([self._means(c).flatten(1).cpu() for c in copies])
        p = flat.view(len(levels), len(subsets), y.shape[0], len(views), -1)
        for i, sigma in enumerate(levels):
            for j, subset in enumerate(subsets):
                for k in subset:
                    self.noisy[sigma][k].append((p[i, j, :, k][rows[k]], y[rows[k]]))

    def _scores(self, parts: list[tuple[Tensor, Tensor]]) -> tuple[float, float]:
        if not parts or not sum(len(y) for _, y in parts):
            return float("nan"), float("nan")
        probs, labels = torch.cat([p for p, _ in parts]), torch.cat([y for _, y in parts])
        return metrics.accuracy(probs, labels), metrics.ece(probs, labels, self.model.protocol.n_bins)

    def results(self) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """The ``view/`` metrics and the (M, len(σ)) arrays; both empty when the model has no per-view prediction."""
        if not self.active or not any(self.clean):
            return {}, {}
        out: dict[str, float] = {}
        m = len(self.clean)
        for k in range(m):
            out[f"view/acc@v{k}"], out[f"view/ece@v{k}"] = self._scores(self.clean[k])
        out["view/acc_mean"] = float(np.mean([out[f"view/acc@v{k}"] for k in range(m)]))
        out["view/ece_mean"] = float(np.mean([out[f"view/ece@v{k}"] for k in range(m)]))
        if not self.model.noise_subsets:
            return out, {}
        # a view in no noise subset (eval.noise_max_subsets drew none with it) has no noisy metric: NaN in the arrays
        noised = sorted({k for subset in self.model.noise_subsets for k in subset})
        acc = np.full((m, len(self.noisy)), np.nan)
        ece = np.full_like(acc, np.nan)
        for i, (sigma, per_view) in enumerate(self.noisy.items()):
            key = sigma_key(sigma)
            for k in noised:
                acc[k, i], ece[k, i] = self._scores(per_view[k])
                out[f"view/acc@v{k}@{key}"], out[f"view/ece@v{k}@{key}"] = float(acc[k, i]), float(ece[k, i])
            out[f"view/acc@{key}"] = float(np.mean(acc[noised, i]))
            out[f"view/ece@{key}"] = float(np.mean(ece[noised, i]))
        for k in noised:
            out[f"view/noise_acc_mean@v{k}"] = float(np.mean(acc[k]))
            out[f"view/noise_ece_mean@v{k}"] = float(np.mean(ece[k]))
        return out, {"view/noise_acc": acc, "view/noise_ece": ece}
