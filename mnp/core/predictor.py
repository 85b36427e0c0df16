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
from mnp.core.stored_config import checked_run_config, restore_model
from mnp.core.stored_prep import check_finite_weights, checked_preprocessing

log = logging.getLogger(__name__)


class Predictor:
    """A trained model with its run's preprocessing. ``model`` is the :class:`~mnp.core.routine.Routine`,
    ``classes`` the file's label of each probability column, ``view_names`` the views in the run's order."""

    def __init__(self, model, prep: dict, seed: int = 0):
        self.model, self.seed = model.eval(), int(seed)
        self.scaling, self.own_scaling = prep["scaling"], bool(prep["scale_test_separately"])
        self.shift = [np.asarray(s, dtype=np.float64) for s in prep["shift"]]
        self.scale = [np.asarray(s, dtype=np.float64) for s in prep["scale"]]
        self.classes = np.asarray(prep["labels"])
        self.batch_size = int(prep["eval_batch_size"])
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
                shift, scale = sc.shift, sc.scale
            with np.errstate(over="ignore", invalid="ignore"):
                out.append(torch.as_tensor((x - shift) / scale, dtype=torch.float32))
        return out

    def predict_proba(self, views: Sequence | Mapping) -> tuple[np.ndarray, np.ndarray]:
        """Mean predictive probabilities (N, K), column k for the label ``classes[k]``, and the uncertainty (N,)
        of raw rows. A view given as None is missing in every row; a row all NaN in a view is missing there."""
        probs, unc = self.model.predict_proba(self.transform(views), batch_size=self.batch_size, seed=self.seed)
        return probs.numpy(), unc.numpy()

    def predict(self, views: Sequence | Mapping) -> np.ndarray:
        """The file's label of the most probable class of each raw row."""
        return self.classes[self.predict_proba(views)[0].argmax(1)]


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
        model = restore_model(ckpt, run_cfg["model"]["_target_"], path)
        prep = checked_preprocessing(ckpt[PREP_KEY], model, path)
    else:
        log.warning(
            "%s holds no preprocessing (written before it was stored): refitting the scalers from the run's data file",
            path,
        )
        run_cfg, _, _, dm, model, _ = load_run(path, data_dir)
        prep = dm.preprocessing()
    check_finite_weights(model, path)
    return Predictor(model, prep, seed=int(run_cfg.get("seed", 0)))
