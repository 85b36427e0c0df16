"""Every model of the framework as a scikit-learn classifier: ``MultiViewClassifier(model="mnp").fit(views, y)``.

The estimator trains as ``train.py model=<model> dataset=custom`` would on the same rows (the custom data's configs:
scaling, batch size, a run sized by optimiser steps), on all the rows given (no test split is held out: that is the
caller's, e.g. ``cross_val_score``), in memory, with no run directory. ``views`` are a list of (n, d_v) arrays, one
per view, or one (n, d) matrix cut into views by ``view_columns`` (their widths; None: one view). ``settings`` holds
config overrides, ``{"model.memory.size": 200, "trainer.max_epochs": 30}``. A view given as None, or a row all NaN
in a view, is missing there at prediction; the training rows must be complete.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

CONF = Path(__file__).resolve().parents[1] / "conf"
IN_MEMORY = "<arrays given to fit>"  # dataset.path of an estimator's config: no file is read


class MultiViewClassifier(ClassifierMixin, BaseEstimator):
    """A framework model (``model``: mnp, mlp, mcd, de_ef, de_lf, sngp, etp, tmc, mgp, mnp_official) fitted on
    in-memory views; ``predict_proba`` gives the (n, K) probabilities of ``classes_``, ``predict_uncertainty`` the
    model's own uncertainty score per row."""

    def __init__(
        self,
        model: str = "mnp",
        view_columns: Sequence[int] | None = None,
        settings: Mapping[str, Any] | None = None,
        seed: int = 0,
    ):
        self.model = model
        self.view_columns = view_columns
        self.settings = settings
        self.seed = seed

    # ------------------------------------------------------------------ input
    def _views(self, X, y=None, fitting: bool = False) -> tuple[list, np.ndarray | None]:
        """``X`` as a list of float arrays (None: a missing view) and ``y`` as labels, checked as scikit-learn
        checks its estimators' input; a list whose items are 2D arrays (or None) is views, anything else rows."""
        from sklearn.utils.validation import check_array, check_consistent_length, column_or_1d, validate_data

        finite = True if fitting else "allow-nan"  # a row all NaN in a view is missing there, at prediction only
        if isinstance(X, (list, tuple)) and X and all(v is None or np.ndim(v) == 2 for v in X):
            views = [None if v is None else check_array(v, dtype=np.float64, ensure_all_finite=finite) for v in X]
            present = [v for v in views if v is not None]
            if not present or (fitting and len(present) < len(views)):
                raise ValueError("the training views must all be given (None marks a missing view at prediction)")
            check_consistent_length(*present)
            if fitting:
                self.n_features_in_ = sum(v.shape[1] for v in views)
            if y is not None:
                y = column_or_1d(y, warn=True)
                check_consistent_length(present[0], y)
        else:
            if fitting:
                X, y = validate_data(self, X, y, dtype=np.float64, ensure_all_finite=finite, y_numeric=False)
            else:
                X = validate_data(self, X, dtype=np.float64, ensure_all_finite=finite, reset=False)
            widths = list(self.view_columns) if self.view_columns is not None else [X.shape[1]]
            if sum(widths) != X.shape[1]:
                raise ValueError(f"view_columns {widths} add up to {sum(widths)} columns; X has {X.shape[1]}")
            views = np.split(X, np.cumsum(widths)[:-1], axis=1)
        if not fitting and len(views) != len(self.view_dims_):
            raise ValueError(f"got {len(views)} views; the estimator was fitted on {len(self.view_dims_)}")
        return views, y

    def _config(self):
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        from mnp.cli.resolvers import register_resolver

        register_resolver()
        settings = [f"{k}={_override(v)}" for k, v in (self.settings or {}).items()]
        overrides = [f"model={self.model}", "dataset=custom", f"dataset.path='{IN_MEMORY}'", f"seed={int(self.seed)}"]
        overrides.append(f"paths.output_dir='{IN_MEMORY}'")  # nothing is written: no run directory
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
                return compose("train", overrides=[*overrides, "logger=none", *settings])
        finally:
            GlobalHydra.instance().clear()

    # ------------------------------------------------------------------ fit and predict
    def fit(self, X, y):
        import pytorch_lightning as pl

        from datamodules.base import TensorDataModule
        from mnp.cli.builders import build, build_model
        from mnp.cli.console import quiet
        from mnp.cli.predictor import Predictor
        from mnp.cli.validate import resolve_auto, resolve_epochs, validate

        quiet()
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        views, y = self._views(X, y, fitting=True)
        check_classification_targets(y)
        self.classes_, y_index = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"y holds {len(self.classes_)} class; a classifier needs at least 2")
        cfg = self._config()
        data = cfg.dataset
        dm = TensorDataModule(
            views,
            y_index,
            train_idx=np.arange(len(y)),
            test_idx=np.empty(0, dtype=np.int64),
            scaling=data.scaling,
            batch_size=data.batch_size,
            seed=int(self.seed),
        )
        dm.setup("fit")
        resolve_epochs(cfg, lambda: ("custom", dm))  # as train.py: epochs from train_steps, then the warm-up's share
        resolve_auto(cfg)
        validate(cfg)
        pl.seed_everything(int(self.seed), workers=True, verbose=False)
        _, module = build_model(cfg, dm)
        trainer = build(
            "trainer",
            cfg.trainer,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
        )
        lightning = logging.getLogger("pytorch_lightning")
        level, _ = lightning.level, lightning.setLevel(logging.WARNING)  # no per-fit lines in a notebook
        try:
            trainer.fit(module, datamodule=dm)
        finally:
            lightning.setLevel(level)
        self.view_dims_ = list(dm.view_dims)
        self.predictor_ = Predictor(module, dm.preprocessing(), seed=int(self.seed))
        self.config_ = cfg
        return self

    def _predict(self, X) -> tuple[np.ndarray, np.ndarray]:
        check_is_fitted(self, "predictor_")
        return self.predictor_.predict_proba(self._views(X)[0], return_uncertainty=True)

    def predict_proba(self, X) -> np.ndarray:
        """The (n, K) mean predictive probabilities, column k for ``classes_[k]``."""
        return self._predict(X)[0]

    def predict_uncertainty(self, X) -> np.ndarray:
        """The model's own uncertainty score of each row (MNP: its predictive variance; docs/method.md §5)."""
        return self._predict(X)[1]

    def predict(self, X) -> np.ndarray:
        probs = self.predict_proba(X)
        return self.classes_[probs.argmax(1)]

    def __getstate__(self):  # the composed config holds Hydra nodes that pickle as plain data
        state = copy.copy(self.__dict__)
        if "config_" in state:
            from omegaconf import OmegaConf

            state["config_"] = OmegaConf.to_container(state["config_"], resolve=True)
        return state


def _override(value: Any) -> str:
    """A Python value as the right-hand side of a Hydra override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override(v) for v in value) + "]"
    return str(value)
