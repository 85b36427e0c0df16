"""Bad values in data that reads: labels renumbered (even from 10⁹), a test split that comes out empty, a view
that overflows in scaling (and huge values that minmax scales), complex views, and the data modules' config values
checked in the constructor; each a one-line DataError (the files themselves: tests/test_bad_input_data.py)."""

import logging

import numpy as np
import pytest
import scipy.io
import torch
from test_bad_input_data import cell, custom, error_of, npz

from datamodules import TensorDataModule
from datamodules.custom import CustomDataModule
from datamodules.errors import DataError


# ---------------------------------------------------------------------------- labels, splits, values
def test_huge_label_renumbered_without_building_the_label_range(tmp_path, tiny_views, caplog):
    """Labels {0, 5, 10⁹}: renumbered 0, 1, 2 via np.unique (no array of 10⁹ + 1 entries); the warning
    counts the absent labels and shows the first few."""
    views, y = tiny_views
    path = npz(tmp_path, x1=views[0], x2=views[1], y=np.array([0, 5, 10**9])[y])
    with caplog.at_level(logging.WARNING, logger="datamodules.base"):
        dm = CustomDataModule(str(path))
        dm.setup()
    assert dm.num_classes == 3
    got = np.empty(len(y), dtype=np.int64)
    got[dm.train_idx], got[dm.test_idx] = dm.train_y.numpy(), dm.test_y.numpy()
    np.testing.assert_array_equal(got, y)
    [warning] = [r.getMessage() for r in caplog.records if "never occur" in r.getMessage()]
    assert (
        "labels [1, 2, 3, 4, 6, ...] (999999998 in all) never occur (labels span 0..1000000000); "
        "the 3 classes present are renumbered 0..2" in warning
    )
    assert len(warning) < 300


@pytest.mark.parametrize(
    "per_class,kw,expected",
    [
        (1, {}, "every class has one sample, which stays in training; add samples"),
        (
            2,
            {},
            "dataset.test_fraction=0.2 of at most 2 samples per class rounds to 0; "
            "add samples or raise it (+dataset.test_fraction=...)",
        ),
        (
            4,
            {"test_fraction": 0.1},
            "dataset.test_fraction=0.1 of at most 4 samples per class rounds to 0; "
            "add samples or raise it (+dataset.test_fraction=...)",
        ),
    ],
)
def test_empty_test_split_fails_in_setup(tmp_path, per_class, kw, expected):
    """Found before training (it used to end in an AttributeError after training)."""
    y = np.repeat(np.arange(3), per_class)
    path = npz(tmp_path, x1=np.random.default_rng(0).normal(size=(len(y), 2)), y=y)
    assert error_of(custom(path, **kw)) == f"{path}: the test split is empty: {expected}"


def test_test_indices_all_held_out_as_ood_fail_in_setup(tmp_path, tiny_views):
    views, y = tiny_views
    path = npz(tmp_path, x1=views[0], y=y, train_idx=np.flatnonzero(y < 2), test_idx=np.flatnonzero(y == 2))
    msg = error_of(custom(path, ood_classes=[2]))
    assert (
        msg == f"{path}: the test split is empty: the split's test indices hold no sample outside "
        "dataset.ood_classes; give test samples"
    )


def test_explicitly_empty_test_set_is_fit_only(tiny_views):
    """In-memory arrays given no test indices set up for fitting alone (no error, no test rows)."""
    views, y = tiny_views
    dm = TensorDataModule(views, y, np.arange(36), np.arange(0))
    dm.setup()
    assert (len(dm.train_y), len(dm.test_y)) == (36, 0)


@pytest.mark.parametrize("scaling,factor", [("standard", 1e307), ("none", 1e307), ("standard", 1e200)])
def test_scaling_overflow_names_the_view(tmp_path, tiny_views, scaling, factor):
    """×1e307 overflows the standard scaler's mean (and float32 without scaling); ×1e200 its variance,
    which would silently turn the view into zeros."""
    views, y = tiny_views
    msg = error_of(custom(npz(tmp_path, x1=views[0], x2=views[1] * factor, y=y), scaling=scaling))
    assert msg.startswith(
        f"{tmp_path / 'bad.npz'}: view 2 overflowed in scaling (dataset.scaling={scaling}): its values, up to "
    )
    assert msg.endswith("are too large for the scaler or for float32; divide the view by a constant before saving it")


def test_huge_but_representable_values_scale_with_minmax(tmp_path, tiny_views):
    views, y = tiny_views
    dm = CustomDataModule(str(npz(tmp_path, x1=views[0], x2=views[1] * 1e307, y=y)), scaling="minmax")
    dm.setup()
    x2 = dm.train_views[1]
    assert torch.isfinite(x2).all() and x2.min() == 0 and x2.max() == 1


def complex_view(tmp_path, kind, views, y):
    x1 = views[0] + 1j * views[0]
    if kind == "npz":
        return custom(npz(tmp_path, x1=x1, x2=views[1], y=y)), "view x1"
    if kind == "mat":
        scipy.io.savemat(tmp_path / "c.mat", {"X": cell([x1, views[1]]), "gt": y[:, None] + 1})
        return custom(tmp_path / "c.mat"), "view 1"
    return (lambda: TensorDataModule([x1, views[1]], y)), "view 1"


@pytest.mark.parametrize("kind", ["npz", "mat", "tensors"])
def test_complex_view_is_rejected(tmp_path, tiny_views, kind):
    make, view = complex_view(tmp_path, kind, *tiny_views)
    msg = error_of(make)
    assert f"{view} is complex-valued (dtype complex128); its imaginary part would be lost: save real features" in msg


# ---------------------------------------------------------------------------- config values
@pytest.mark.parametrize(
    "kw,expected",
    [
        ({"batch_size": 0}, "dataset.batch_size must be an integer >= 1, got 0"),
        ({"batch_size": -1}, "dataset.batch_size must be an integer >= 1, got -1"),
        ({"batch_size": 2.5}, "dataset.batch_size must be an integer >= 1, got 2.5"),
        ({"eval_batch_size": 0}, "dataset.eval_batch_size must be an integer >= 1, got 0"),
        ({"val_fraction": 1.0}, "dataset.val_fraction must be a fraction in [0, 1), got 1.0"),
        ({"val_fraction": -0.5}, "dataset.val_fraction must be a fraction in [0, 1), got -0.5"),
        ({"test_fraction": 0}, "dataset.test_fraction must be a fraction in (0, 1), got 0"),
        ({"test_fraction": 1.0}, "dataset.test_fraction must be a fraction in (0, 1), got 1.0"),
        ({"test_fraction": "half"}, "dataset.test_fraction must be a fraction in (0, 1), got 'half'"),
    ],
)
def test_config_values_checked_in_the_constructor(tmp_path, kw, expected):
    """Before any data is read (the path does not even exist)."""
    with pytest.raises(DataError) as e:
        CustomDataModule(str(tmp_path / "nope.npz"), **kw)
    assert str(e.value) == expected


def test_boundary_config_values_are_accepted(tmp_path):
    dm = CustomDataModule(str(tmp_path / "nope.npz"), batch_size=1, val_fraction=0, test_fraction=0.99)
    assert (dm.batch_size, dm.val_fraction, dm.test_fraction) == (1, 0.0, 0.99)
