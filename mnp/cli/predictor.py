"""``mnp.load(run)``: a trained run as a predictor on raw rows, with the run's own preprocessing.

The pipeline stores the preprocessing in every checkpoint (``PREP_KEY``, written by
:class:`~mnp.cli.builders.StoreConfig` from :meth:`~datamodules.base.MultiViewDataModule.preprocessing`): each
view's scaler fitted on the training rows, the file's label of each class index, and the evaluation batch size.
:meth:`Predictor.predict_proba` scales raw rows with it and predicts in the test loop's batches, each sampling
from the test loop's generator, so on the run's test rows it gives ``predictions.npz``'s numbers exactly.
The stored values and the weights are checked at load (:mod:`mnp.runs.stored_prep`). A checkpoint written before
the preprocessing was stored is refitted from the run's data file, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from datamodules.base import Scaler
from datamodules.checks import link_fault
from mnp.cli.run_loading import load_run
from mnp.eval.posthoc import PostHoc
from mnp.runs.checkpointing import CFG_KEY, LAST, PREP_KEY, load_checkpoint
from mnp.runs.stored_config import checked_run_config, restore_model
from mnp.runs.stored_prep import check_finite_weights, checked_preprocessing

log = logging.getLogger(__name__)


class Predictor:
    """A trained model with its run's preprocessing. ``model`` is the :class:`~mnp.framework.routine.Routine`,
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
        """The views as a list in the run's order; a mapping is read by the file's view names (x1, x2, ...), each
        of which it must hold (a forgotten key was taken as a missing view without a word)."""
        names = ", ".join(self.view_names)
        if isinstance(views, Mapping):
            if unknown := sorted(set(views) - set(self.view_names), key=str):
                raise ValueError(f"unknown view {unknown[0]!r}; this run's views are {names}")
            if absent := [name for name in self.view_names if name not in views]:
                raise ValueError(
                    f"the views given lack {absent[0]!r}; this run's views are {names} "
                    f"(give {absent[0]!r}: None to predict without that view)"
                )
            return [views[name] for name in self.view_names]
        if isinstance(views, (str, bytes)) or not isinstance(views, Iterable):  # a str was read as views of letters
            raise ValueError(
                f"views must be a list of arrays, one per view ({names}), or a dict by view name; "
                f"got a {type(views).__name__}"
            )
        return list(views)

    def transform(self, views: Sequence | Mapping, scaling: str = "run") -> list[torch.Tensor | None]:
        """Raw rows scaled as the run scaled its test rows (``scaling="run"``) or with its training scalers
        (``"train"``), as float32, the model's precision; None stays None."""
        if scaling not in ("run", "train"):
            raise ValueError(
                f"scaling must be 'run' (as the run scaled its test rows) or 'train' (the run's training scalers), "
                f"got {scaling!r}"
            )
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
            name = self.view_names[v]
            try:
                x = np.asarray(x, dtype=np.float64)
            except (TypeError, ValueError) as e:
                raise ValueError(
                    f"view {name} is not an array of numbers ({e}); give None for a missing view"
                ) from None
            if x.ndim != 2 or x.shape[1] != len(shift):
                raise ValueError(
                    f"view {name} has shape {x.shape}; the run was trained on rows of {len(shift)} columns"
                )
            if self.own_scaling and scaling == "run":
                shift, scale = self._own_scaler(name, x, shift, scale)
            out.append(torch.as_tensor(_scaled(name, x, shift, scale)))
        return out

    def _own_scaler(self, name: str, x: np.ndarray, shift: np.ndarray, scale: np.ndarray) -> tuple:
        """The shift and scale of the rows given (``dataset.scale_test_separately``, as the run's test rows were).

        A column the same in every row scales to 0: where the training scaler would not map it to 0, its values
        are ignored. A warning says so; a view all of whose columns are so (one row, or copies of one) is
        refused, since the prediction would not depend on it (round 5: L44)."""
        rows = x[np.isfinite(x).all(1)]  # a missing (all-NaN) row has no say; a non-finite one is refused later
        if not len(rows):
            return shift, scale
        # rtol: a column constant in training has its mean as shift, which may be an ulp off its value
        lost = (np.ptp(rows, 0) == 0) & ~np.isclose(rows[0], shift, rtol=1e-9, atol=0)
        if lost.any() and (np.ptp(rows, 0) == 0).all():
            raise ValueError(
                f"view {name}: the {len(rows)} row(s) given have one value per column, so scaled on their own "
                "statistics (the run's dataset.scale_test_separately) they are all 0 and the prediction would "
                "ignore them; pass the rows together, as the run's test set was, or scaling='train' to scale them "
                "with the run's training scaler"
            )
        if lost.any():
            log.warning(
                "view %s: %d of its %d columns (the first: %d) have one value in all %d rows given, so scaled on "
                "their own statistics (the run's dataset.scale_test_separately) they are 0 and their values are "
                "ignored; pass more rows together, or scaling='train'",
                name,
                int(lost.sum()),
                len(lost),
                int(lost.argmax()),
                len(rows),
            )
        own = Scaler(self.scaling).fit(rows)
        return own.shift, own.scale

    def predict_proba(self, views: Sequence | Mapping, return_uncertainty: bool = False, scaling: str = "run"):
        """Mean predictive probabilities (N, K) of raw rows, column k for the label ``classes[k]``, as scikit-learn's
        ``predict_proba``; with ``return_uncertainty=True`` also the model's uncertainty (N,), as a tuple. A view
        given as None is missing in every row; a row all NaN in a view is missing there.

        ``scaling``: "run" scales the rows as the run scaled its test rows: with its training scalers, or, in a
        run with ``dataset.scale_test_separately=true``, on the statistics of the rows given (so pass them
        together; one row alone is refused); "train": with the run's training scalers.
        Sampling models (MNP, MC dropout) draw their Monte-Carlo samples per batch of ``eval_batch_size`` rows,
        so a row's probabilities vary, within the Monte-Carlo error, with the other rows of the call and its
        place among them; the same rows in the same order give the same numbers (the run's test rows give its
        ``predictions.npz``). More samples (MNP: ``model.decoder.eval_samples``) shrink the variation."""
        views = self.transform(views, scaling)
        return self.model.predict_proba(views, self.batch_size, self.seed, return_uncertainty=return_uncertainty)

    def predict_uncertainty(self, views: Sequence | Mapping, scaling: str = "run") -> np.ndarray:
        """The model's uncertainty score (N,) of raw rows (higher: less certain; docs/method.md §5)."""
        return self.predict_proba(views, return_uncertainty=True, scaling=scaling)[1]

    def predict(self, views: Sequence | Mapping, scaling: str = "run") -> np.ndarray:
        """The file's label of the most probable class of each raw row (``scaling``: as in :meth:`predict_proba`)."""
        return self.classes[self.predict_proba(views, scaling=scaling).argmax(1)]

    def predict_set(self, views: Sequence | Mapping, alpha: float | None = None) -> np.ndarray:
        """Conformal prediction sets (N, K) bool of raw rows, column k for ``classes[k]`` (docs/method.md §5.7):
        the run's ``eval.conformal`` score (after its ``eval.calibration``), refitted from the validation
        predictions its ``predictions.npz`` stored, at the run's ``eval.conformal_alpha`` or at ``alpha``."""
        if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1):
            raise ValueError(f"alpha must be a number in (0, 1) (the sets miss at most that), got {alpha!r}")
        stage = PostHoc.from_run(self.run_eval, self.seed, self.run_dir / "predictions.npz")
        return stage.sets(torch.as_tensor(np.asarray(self.predict_proba(views))), alpha).numpy()


def _scaled(name: str, x: np.ndarray, shift: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(x - shift) / scale`` in float32; a finite value whose scaled value overflows float32 is refused (the
    cast made it an infinity, which was reported as one the user gave: round 5, L14)."""
    with np.errstate(over="ignore", invalid="ignore"):
        z = (x - shift) / scale
        z32 = z.astype(np.float32)
    if (over := np.isfinite(x) & ~np.isfinite(z32)).any():
        r, c = (int(i) for i in np.argwhere(over)[0])
        raise ValueError(
            f"view {name} row {r} holds {x[r, c]:.6g} in column {c}, which scaled ({z[r, c]:.3g}) overflows "
            f"float32, the model's precision (at most {np.finfo(np.float32).max:.3g}); clip it, or give the row "
            "as NaN (a missing view)"
        )
    return z32


def checkpoint_path(run: str | Path) -> Path:
    """A run directory's ``checkpoints/last.ckpt``, or the checkpoint file given."""
    run = Path(run).expanduser()
    for link in (run, run / "checkpoints" / LAST):
        if what := link_fault(link):
            raise FileNotFoundError(f"{link} is {what}; point it at a run directory of train.py or a .ckpt")
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
    predictor = Predictor(model, prep, seed=int(run_cfg.get("seed", 0)))
    predictor.run_eval, predictor.run_dir = run_cfg.get("eval"), path.parent.parent  # for predict_set
    return predictor
