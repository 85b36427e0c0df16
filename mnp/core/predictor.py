"""``mnp.load(run)``: a trained run as a predictor on raw rows, with the run's own preprocessing.

The pipeline stores the preprocessing in every checkpoint (``PREP_KEY``, written by
:class:`~mnp.core.builders.StoreConfig` from :meth:`~datamodules.base.MultiViewDataModule.preprocessing`): each
view's scaler fitted on the training rows, the file's label of each class index, and the evaluation batch size.
:meth:`Predictor.predict_proba` scales raw rows with it and predicts in the test loop's batches, each sampling
from the test loop's generator, so on the run's test rows it gives ``predictions.npz``'s numbers exactly.
A checkpoint written before the preprocessing was stored is refitted from the run's data file, with a warning.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

from datamodules.base import Scaler
from mnp.core.checkpointing import CFG_KEY, LAST, PREP_KEY, load_checkpoint
from mnp.core.pipeline import load_run
from mnp.core.posthoc import PostHoc
from mnp.core.stored_config import checked_run_config, restore_model

log = logging.getLogger(__name__)


class Predictor:
    """A trained model with its run's preprocessing. ``model`` is the :class:`~mnp.core.routine.Routine`,
    ``classes`` the file's label of each probability column, ``view_names`` the views in the run's order."""

    def __init__(self, model, prep: dict, seed: int = 0, source: str = "the run"):
        self.model, self.seed = model.eval(), int(seed)
        checked = checked_preprocessing(prep, list(model.view_dims), int(model.num_classes), source)
        self.scaling, self.own_scaling, self.shift, self.scale, self.classes, self.batch_size = checked
        self.view_names = [f"x{v + 1}" for v in range(len(self.shift))]

    def _ordered(self, views: Sequence | Mapping) -> list:
        """The views as a list in the run's order; a mapping is read by the file's view names (x1, x2, ...)."""
        if isinstance(views, Mapping):
            if unknown := sorted(set(views) - set(self.view_names)):
                raise ValueError(f"unknown view {unknown[0]!r}; this run's views are {', '.join(self.view_names)}")
            return [views.get(name) for name in self.view_names]
        return list(views)

    def transform(self, views: Sequence | Mapping) -> list[torch.Tensor | None]:
        """Raw rows scaled as the run scaled its test rows (float32, as the model saw them); None stays None."""
        views = self._ordered(views)
        if len(views) != len(self.shift):
            raise ValueError(
                f"got {len(views)} views; this run was trained on {len(self.shift)} ({', '.join(self.view_names)})"
            )
        out = []
        for v, (x, shift, scale) in enumerate(zip(views, self.shift, self.scale)):
            if x is None:
                out.append(None)
                continue
            x = np.asarray(x, dtype=np.float64)
            if x.ndim != 2 or x.shape[1] != len(shift):
                raise ValueError(
                    f"view {self.view_names[v]} has shape {x.shape}; the run was trained on rows of "
                    f"{len(shift)} columns"
                )
            if self.own_scaling:  # dataset.scale_test_separately: the rows given are scaled on their own statistics
                sc = Scaler(self.scaling).fit(x)
                if self.scaling != "none" and (len(x) < 2 or not np.ptp(x, axis=0).any()):  # every column constant
                    raise ValueError(
                        f"this run scales the rows of each call on their own statistics (dataset.scale_test_separately"
                        f"=true, as the authors' code tests), and view {self.view_names[v]}'s "
                        f"{'one row' if len(x) < 2 else f'{len(x)} rows are all equal and'} would scale to zeros: the "
                        "prediction would ignore them. Pass the rows together, or set predictor.own_scaling = False "
                        "to scale them with the run's training scalers"
                    )
                shift, scale = sc.shift, sc.scale
            with np.errstate(over="ignore", invalid="ignore"):
                out.append(torch.as_tensor((x - shift) / scale, dtype=torch.float32))
        return out

    def predict_proba(self, views: Sequence | Mapping, return_uncertainty: bool = False):
        """Mean predictive probabilities (N, K) of raw rows, column k for the label ``classes[k]``, as scikit-learn's
        ``predict_proba``; with ``return_uncertainty=True`` also the model's uncertainty (N,), as a tuple. A view
        given as None is missing in every row; a row all NaN in a view is missing there."""
        views = self.transform(views)
        return self.model.predict_proba(views, self.batch_size, self.seed, return_uncertainty=return_uncertainty)

    def predict_uncertainty(self, views: Sequence | Mapping) -> np.ndarray:
        """The model's uncertainty score (N,) of raw rows (higher: less certain; docs/method.md §5)."""
        return self.predict_proba(views, return_uncertainty=True)[1]

    def predict(self, views: Sequence | Mapping) -> np.ndarray:
        """The file's label of the most probable class of each raw row."""
        return self.classes[self.predict_proba(views).argmax(1)]

    def predict_set(self, views: Sequence | Mapping, alpha: float | None = None) -> np.ndarray:
        """Conformal prediction sets (N, K) bool of raw rows, column k for ``classes[k]`` (docs/method.md §5.7):
        the run's ``eval.conformal`` score (after its ``eval.calibration``), refitted from the validation
        predictions its ``predictions.npz`` stored, at the run's ``eval.conformal_alpha`` or at ``alpha``."""
        if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1):
            raise ValueError(f"alpha must be a number in (0, 1) (the sets miss at most that), got {alpha!r}")
        stage = PostHoc.from_run(self.run_eval, self.seed, self.run_dir / "predictions.npz")
        return stage.sets(torch.as_tensor(np.asarray(self.predict_proba(views))), alpha).numpy()


def checked_preprocessing(prep: dict, view_dims: list[int], num_classes: int, source: str) -> tuple:
    """The stored preprocessing as (scaling, own_scaling, shifts, scales, labels, batch size), each value checked
    against the model it serves; a ValueError naming ``source`` and the value otherwise (a damaged or crafted
    checkpoint must not predict from sign-flipped or dropped views)."""

    def bad(what: str) -> ValueError:
        return ValueError(f"{source}: its stored preprocessing is inconsistent: {what}; the checkpoint is damaged")

    try:
        shift = [np.asarray(s, dtype=np.float64) for s in prep["shift"]]
        scale = [np.asarray(s, dtype=np.float64) for s in prep["scale"]]
        labels, batch = np.asarray(prep["labels"]), prep["eval_batch_size"]
        scaling, own = prep["scaling"], prep["scale_test_separately"]
    except (KeyError, TypeError, ValueError) as e:
        raise bad(f"{type(e).__name__}: {e}") from None
    Scaler(scaling)  # a DataError naming an unknown scaling
    if len(shift) != len(view_dims) or len(scale) != len(view_dims):
        raise bad(f"{len(shift)} shifts and {len(scale)} scales for a model of {len(view_dims)} views")
    for v, (a, b, d) in enumerate(zip(shift, scale, view_dims)):
        if a.shape != (d,) or b.shape != (d,):
            raise bad(f"view x{v + 1}'s scaler has shapes {a.shape} and {b.shape}; the model reads {d} columns")
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            raise bad(f"view x{v + 1}'s scaler holds a value that is not finite")
        if (b <= 0).any():
            raise bad(f"view x{v + 1}'s scale holds {b[b <= 0][0]:g}: a scale must be > 0")
    if labels.shape != (num_classes,):
        raise bad(f"{labels.size} class labels for a model of {num_classes} classes")
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValueError(f"{source}: batch_size must be an integer >= 1 (its stored eval_batch_size), got {batch!r}")
    return scaling, bool(own), shift, scale, labels, int(batch)


def checkpoint_path(run: str | Path) -> Path:
    """A run directory's ``checkpoints/last.ckpt``, or the checkpoint file given."""
    run = Path(run).expanduser()
    if run.is_dir():
        path = run / "checkpoints" / LAST
        if not path.is_file():
            raise FileNotFoundError(f"{run} holds no checkpoints/{LAST}; pass a run directory of train.py or a .ckpt")
        return path
    if not run.is_file():
        raise FileNotFoundError(f"{run} is neither a run directory nor a checkpoint file")
    return run


def load(run: str | Path, data_dir: str | None = None) -> Predictor:
    """The predictor of a run directory (its ``checkpoints/last.ckpt``) or of a checkpoint file.

    A checkpoint without the stored preprocessing (written before it was stored) is rebuilt from the run's data
    file, in ``data_dir`` if given, and its training scalers refitted, with a warning."""

    path = checkpoint_path(run)
    ckpt = load_checkpoint(path)
    if CFG_KEY not in ckpt:
        raise KeyError(f"{path} has no '{CFG_KEY}' entry; it was not written by train.py")
    if PREP_KEY in ckpt:
        run_cfg = checked_run_config(ckpt[CFG_KEY], path)
        model, prep = restore_model(ckpt, run_cfg["model"]["_target_"], path), ckpt[PREP_KEY]
    else:
        log.warning(
            "%s holds no preprocessing (written before it was stored): refitting the scalers from the run's data file",
            path,
        )
        run_cfg, _, _, dm, model, _ = load_run(path, data_dir)
        prep = dm.preprocessing()
    predictor = Predictor(model, prep, seed=int(run_cfg.get("seed", 0)), source=str(path))
    predictor.run_eval, predictor.run_dir = run_cfg.get("eval"), path.parent.parent  # for predict_set
    return predictor
