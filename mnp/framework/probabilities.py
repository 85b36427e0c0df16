"""``predict_proba``'s result: the (n, K) probabilities as a numpy array, as scikit-learn's."""

from __future__ import annotations

import warnings

import numpy as np


class Probabilities(np.ndarray):
    """``predict_proba``'s (n, K) array. For one release, unpacking it as the pair of before (``probs, unc =
    predictor.predict_proba(X)``) warns, since it now iterates over rows; anything derived from it is a plain array."""

    def __iter__(self):
        if self.ndim != 2:  # what numpy derives from it (argmax(1), a row) iterates quietly
            return iter(np.asarray(self))
        warnings.warn(
            "predict_proba returns the (n, K) probabilities now, not (probabilities, uncertainty): iterating over it "
            "gives its rows; use predict_proba(X, return_uncertainty=True) for the pair (this warning goes in the "
            "next release)",
            FutureWarning,
            stacklevel=2,
        )
        return iter(np.asarray(self))

    def __getitem__(self, key):
        return np.asarray(self)[key]

    def __array_wrap__(self, array, context=None, return_scalar=False):
        return array.view(np.ndarray) if isinstance(array, np.ndarray) and not return_scalar else array[()]
