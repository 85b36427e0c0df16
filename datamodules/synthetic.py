"""The multimodal two moons of the paper's Figure 2 (docs/method.md §4), generated in memory."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import make_moons

from datamodules.base import MultiViewDataModule, RawData


def two_moons(n: int, noise: float, seed: int, num_views: int = 1) -> tuple[list[np.ndarray], np.ndarray]:
    """Two moons; with ``num_views`` > 1 every view is an independently-noised copy of the 2-D point."""
    x, y = make_moons(n_samples=n, noise=noise, random_state=seed)
    rng = np.random.default_rng(seed + 1)
    views = [x] + [x + rng.normal(0, noise, x.shape) for _ in range(num_views - 1)]
    return views, y


def mesh(lim: tuple[float, float, float, float] = (-2.5, 3.5, -2.0, 2.5), steps: int = 100) -> np.ndarray:
    """The 100×100 evaluation grid of Figure 2, as (steps², 2)."""
    xs, ys = np.linspace(lim[0], lim[1], steps), np.linspace(lim[2], lim[3], steps)
    gx, gy = np.meshgrid(xs, ys)
    return np.stack([gx.ravel(), gy.ravel()], 1)


class TwoMoons(MultiViewDataModule):
    """1,000 training samples with noise 0.15 plus a labelled test set from the same distribution.

    Features are left unscaled (scaling="none") so that the input space matches the figure axes.
    """

    name = "synthetic"

    def __init__(self, n_train: int = 1000, n_test: int = 500, noise: float = 0.15, num_views: int = 1, **kwargs):
        kwargs.setdefault("scaling", "none")
        super().__init__(**kwargs)
        self.n_train, self.n_test, self.noise, self.num_views = n_train, n_test, noise, num_views

    def load(self) -> RawData:
        views, y = two_moons(self.n_train + self.n_test, self.noise, self.seed, self.num_views)
        idx = np.arange(self.n_train + self.n_test)
        return RawData(
            views,
            y,
            idx[: self.n_train],
            idx[self.n_train :],
            source="two_moons",
            split="dataset.n_train / dataset.n_test generated rows",
        )
