"""Missing views (docs/method.md §5): the (B, M) ``present`` mask, early fusion's mean imputation and the
pieces of the missing-view protocol that :class:`~mnp.framework.routine.Routine` runs in its test loop.

A view is missing for a row when the view is given as ``None`` (every row) or when the row holds only NaN
in that view. Models receive the views with absent rows zero-filled, so tensors keep their shapes, and
the mask; a fusion model combines the views present, an early-fusion one imputes the training means
(:class:`MeanImputation`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from mnp.eval import metrics

log = logging.getLogger(__name__)


def present_mask(
    views: Sequence[Tensor | None], view_dims: Sequence[int], where: str = ""
) -> tuple[list[Tensor], Tensor | None]:
    """The views with absent rows zero-filled and the (B, M) bool mask of the views present, or the views
    unchanged and None when every row has every view. One-line ValueError (prefixed by ``where``): a wrong
    number of views, no view given, a view not 2-D, views of different row counts, a row partly NaN in a view,
    a row with no view at all."""
    if len(views) != len(view_dims):
        raise ValueError(
            f"{where}the data has {len(views)} views but the model was built for {len(view_dims)} "
            f"(view dims {list(view_dims)})"
        )
    for k, v in enumerate(views):
        if v is not None and v.dim() != 2:
            raise ValueError(
                f"{where}views[{k}] has shape {tuple(v.shape)}; expected rows × columns (2-D, {view_dims[k]} columns)"
            )
    given = [k for k, v in enumerate(views) if v is not None]
    if not given:
        raise ValueError(f"{where}every view is None: there is nothing to predict from")
    ref = views[given[0]]
    cols = []
    for k, v in enumerate(views):
        if v is None:
            cols.append(torch.zeros(ref.shape[0], dtype=torch.bool, device=ref.device))
            continue
        if v.shape[0] != ref.shape[0]:
            raise ValueError(f"{where}views[{k}] has {v.shape[0]} rows but views[{given[0]}] has {ref.shape[0]}")
        nan = torch.isnan(v)
        absent = nan.all(-1)
        if (partial := nan.any(-1) & ~absent).any():
            r = int(partial.nonzero()[0])
            raise ValueError(
                f"{where}views[{k}] row {r} has {int(nan[r].sum())} NaN among its {v.shape[-1]} values: "
                "a missing view is a row of NaN only (or the view given as None); impute the others"
            )
        cols.append(~absent)
    present = torch.stack(cols, 1)
    if len(given) == len(views) and present.all():
        return list(views), None
    if (empty := ~present.any(1)).any():
        r = int(empty.nonzero()[0])
        raise ValueError(f"{where}row {r} has no view: every view is None or NaN there; a row needs at least one view")
    return [
        ref.new_zeros(ref.shape[0], d) if v is None else v.masked_fill(~present[:, k, None], 0.0)
        for k, (v, d) in enumerate(zip(views, view_dims))
    ], present


def without(views: Sequence[Tensor], present: Tensor | None, removed: Sequence[int]) -> tuple[list[Tensor], Tensor]:
    """The views and mask with the views in ``removed`` absent from every row (zero-filled)."""
    mask = (
        torch.ones(views[0].shape[0], len(views), dtype=torch.bool, device=views[0].device)
        if present is None
        else present.clone()
    )
    mask[:, list(removed)] = False
    return [torch.zeros_like(v) if k in removed else v for k, v in enumerate(views)], mask


def removal_sets(num_views: int, noise_subsets: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """What the missing-view protocol removes: each view alone, then each noise-protocol subset that is not
    one of them and leaves a view; none for a single view."""
    if num_views < 2:
        return []
    singles = [(k,) for k in range(num_views)]
    return singles + [tuple(s) for s in noise_subsets if len(s) < num_views and tuple(s) not in singles]


def missing_flag(value) -> bool:
    """``eval.missing``: true or false, else a ValueError naming the key."""
    if not isinstance(value, bool):
        raise ValueError(f"eval.missing must be true or false, got {value!r}")
    return value


def missing_results(
    stores: dict[tuple[int, ...], tuple[list[Tensor], list[Tensor]]],
    num_views: int,
    noise_subsets: Sequence[Sequence[int]],
    n_bins: int,
) -> dict[str, float]:
    """The ``missing/`` metrics from each removal set's (probs, labels) batches: ``acc@v<k>`` and ``ece@v<k>``
    with view k removed, their means, and ``acc_subsets_mean``, the mean accuracy with each noise-protocol
    subset removed (the information left to a model that ignored the noised views entirely)."""

    def scores(removed: tuple[int, ...]) -> tuple[float, float]:
        probs, labels = (torch.cat(parts) for parts in stores[removed])
        if not len(labels):  # every row lost its last view
            return float("nan"), float("nan")
        return metrics.accuracy(probs, labels), metrics.ece(probs, labels, n_bins)

    results: dict[str, float] = {}
    for k in range(num_views):
        results[f"missing/acc@v{k}"], results[f"missing/ece@v{k}"] = scores((k,))
    results["missing/acc_mean"] = float(np.mean([results[f"missing/acc@v{k}"] for k in range(num_views)]))
    results["missing/ece_mean"] = float(np.mean([results[f"missing/ece@v{k}"] for k in range(num_views)]))
    if subsets := [tuple(s) for s in noise_subsets if len(s) < num_views]:  # a single view's accuracy is known
        results["missing/acc_subsets_mean"] = float(
            np.mean([results[f"missing/acc@v{s[0]}"] if len(s) == 1 else scores(s)[0] for s in subsets])
        )
    return results


class MeanImputation:
    """Early fusion with missing views: a missing view's columns take their training means.

    A mixin placed before Routine. ``init_imputation()`` registers the buffer ``view_means`` (the column
    means of the scaled training views, NaN until known), so checkpoints carry it; it is set from the
    datamodule's ``train_views`` when fitting (and when testing a checkpoint written before it existed),
    or by :meth:`set_training_means`.
    """

    filled_on_load = ("view_means",)  # a checkpoint written before the buffer existed still loads (NaN)

    def init_imputation(self) -> None:
        self.register_buffer("view_means", torch.full((sum(self.view_dims),), float("nan")))
        self._imputation_said = False

    @property
    def imputes(self) -> bool:
        return getattr(self, "view_means", None) is not None

    @torch.no_grad()
    def set_training_means(self, train_views: Sequence[Tensor]) -> None:
        cols = torch.cat([torch.as_tensor(v, dtype=torch.float64) for v in train_views], dim=1)
        self.view_means.copy_(cols.mean(0).to(self.view_means))

    def _means_from_datamodule(self, only_unknown: bool) -> None:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if self.imputes and hasattr(dm, "train_views") and not (only_unknown and torch.isfinite(self.view_means).all()):
            self.set_training_means(dm.train_views)

    def on_fit_start(self) -> None:
        super().on_fit_start()
        self._means_from_datamodule(only_unknown=False)

    def on_test_start(self) -> None:
        super().on_test_start()
        self._means_from_datamodule(only_unknown=True)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if self.imputes:  # a checkpoint from before the buffer existed: the means are unknown (NaN) until set
            checkpoint["state_dict"].setdefault("view_means", torch.full_like(self.view_means, float("nan")))
        super().on_load_checkpoint(checkpoint)

    def impute(self, views: list[Tensor], present: Tensor | None) -> list[Tensor]:
        """The views with every absent row replaced by its view's training means (unchanged when ``present``
        is None)."""
        if present is None:
            return views
        if not torch.isfinite(self.view_means).all():
            raise ValueError(
                f"{type(self).__name__} imputes a missing view with its training means, which it has not "
                "recorded: fit it with a datamodule that has train_views or call "
                "model.set_training_means(train_views)"
            )
        if not self._imputation_said and not getattr(self, "removing_views", False):  # the protocol's removals: no news
            log.warning(
                "%s is early fusion: a missing view's columns are imputed with their training means",
                type(self).__name__,
            )
            self._imputation_said = True
        means = self.view_means.split(self.view_dims)
        return [torch.where(present[:, k, None], v, m.to(v.dtype)) for k, (v, m) in enumerate(zip(views, means))]
