"""Helpers for writing small MATLAB files in tests."""

import numpy as np


def cell(arrays):
    """A MATLAB cell(1, V) as scipy.io.savemat writes it: a (1, V) object array."""
    c = np.empty((1, len(arrays)), dtype=object)
    for i, a in enumerate(arrays):
        c[0, i] = a
    return c
