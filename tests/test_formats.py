"""File readers: every layout of SOURCES.md round-trips to samples × features and 0-based labels."""

import h5py
import numpy as np
import pytest
import scipy.io
from mat_utils import cell

from datamodules.errors import DataError
from datamodules.formats import labels, read_file


def test_caltech_layout_cell_features_by_samples_one_based(tmp_path, tiny_views):
    views, y = tiny_views
    path = tmp_path / "2view-caltech101-8677sample.mat"
    scipy.io.savemat(path, {"X": cell([v.T for v in views]), "gt": (y + 1)[:, None].astype(np.uint8)})
    raw = read_file(path)
    assert [v.shape for v in raw.views] == [(36, 5), (36, 3)]
    for got, want in zip(raw.views, views):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.float64
    np.testing.assert_array_equal(raw.y, y)
    assert raw.train_idx is None


def test_cub_layout_cell_samples_by_features_and_zero_based_Y(tmp_path, tiny_views):
    views, y = tiny_views
    path = tmp_path / "hw.mat"
    scipy.io.savemat(path, {"X": cell(views), "Y": y[:, None].astype(np.uint8), "feas": cell(["pix", "fou"])})
    raw = read_file(path)
    np.testing.assert_array_equal(raw.views[0], views[0])
    np.testing.assert_array_equal(raw.y, y)  # 0-based labels stay as they are


def write_hmdb(path, views, y, userblock=True):
    """What MATLAB's save -v7.3 writes: a 512-byte header, arrays stored transposed, gt as (1, N)."""
    with h5py.File(path, "w", userblock_size=512 if userblock else 0) as f:
        for v, x in enumerate(views, 1):
            f[f"x{v}"] = x.T
        f["gt"] = (y + 1)[None, :].astype(np.float64)
    if userblock:
        with open(path, "r+b") as f:
            f.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64".ljust(116) + bytes(8) + b"\x00\x02IM")


def test_hmdb_layout_hdf5_v73_transposed(tmp_path, tiny_views):
    views, y = tiny_views
    path = tmp_path / "HMDB51_HOG_MBH.mat"
    write_hmdb(path, views, y)
    with pytest.raises(NotImplementedError):  # what scipy says: a reader of its own is needed
        scipy.io.loadmat(path)
    raw = read_file(path)
    assert [v.shape for v in raw.views] == [(36, 5), (36, 3)]
    np.testing.assert_array_equal(raw.views[1], views[1])
    np.testing.assert_array_equal(raw.y, y)


def test_hdf5_cell_array_of_references(tmp_path, tiny_views):
    views, y = tiny_views
    path = tmp_path / "cells.mat"
    with h5py.File(path, "w") as f:
        refs = [f.create_dataset(f"#refs#/{i}", data=x).ref for i, x in enumerate(views)]  # features × samples
        f.create_dataset("X", data=np.array(refs, dtype=h5py.ref_dtype)[:, None])
        f["gt"] = (y + 1)[None, :].astype(np.uint8)
    raw = read_file(path)
    for got, want in zip(raw.views, views):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(raw.y, y)


def test_npz_round_trip_with_split(tmp_path, tiny_views):
    views, y = tiny_views
    path = tmp_path / "mine.npz"
    tr, te = np.arange(0, 36, 2), np.arange(1, 36, 2)
    np.savez(path, x1=views[0], x2=views[1].astype(np.float32), y=y, train_idx=tr, test_idx=te)
    raw = read_file(path)
    np.testing.assert_array_equal(raw.views[0], views[0])
    np.testing.assert_allclose(raw.views[1], views[1], rtol=1e-6)
    np.testing.assert_array_equal(raw.y, y)
    np.testing.assert_array_equal(raw.train_idx, tr)
    np.testing.assert_array_equal(raw.test_idx, te)


def test_pre_split_label_base_from_whole_file_and_dtype_cast(tmp_path):
    # PIE-like: class 1 only occurs in the training part; per-split shifting would mislabel the test part.
    gt_train = np.array([1, 1, 2, 3, 4], np.uint8)[:, None]
    gt_test = np.array([2, 3, 4], np.uint8)[:, None]
    path = tmp_path / "pre.mat"
    scipy.io.savemat(
        path,
        {
            "x1_train": np.arange(10, dtype=np.uint8).reshape(5, 2),
            "x1_test": np.full((3, 2), 200, np.uint8),
            "x2_train": np.arange(15, dtype=np.uint16).reshape(5, 3) * 1000,
            "x2_test": np.ones((3, 3), np.uint16),
            "gt_train": gt_train,
            "gt_test": gt_test,
        },
    )
    raw = read_file(path)
    np.testing.assert_array_equal(raw.y, [0, 0, 1, 2, 3, 1, 2, 3])
    np.testing.assert_array_equal(raw.y[raw.test_idx], gt_test.ravel() - 1)
    np.testing.assert_array_equal(raw.train_idx, np.arange(5))
    np.testing.assert_array_equal(raw.test_idx, np.arange(5, 8))
    assert all(v.dtype == np.float64 for v in raw.views)
    assert raw.views[1][4, 2] == 14000.0  # uint16 values survive the cast (no uint8 wrap-around)
    assert raw.views[0][5, 0] == 200.0


def test_label_base_rule():
    y, offset = labels(np.array([[1], [2], [3]], np.uint8), "f")
    np.testing.assert_array_equal(y, [0, 1, 2])
    assert offset == 1
    y, offset = labels(np.array([0, 2, 1]), "f")
    np.testing.assert_array_equal(y, [0, 2, 1])
    assert offset == 0
    y, offset = labels(np.array([2.0, 3.0]), "f")
    np.testing.assert_array_equal(y, [2, 3])  # neither 0- nor 1-based: as is
    assert offset == 0


def test_square_view_is_ambiguous(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "square.mat"
    scipy.io.savemat(path, {"X": cell([rng.normal(size=(4, 4))]), "gt": np.array([[1], [2], [1], [2]])})
    with pytest.raises(DataError, match=r"square.mat: view 1 is 4×4.*cannot be told apart"):
        read_file(path)


def test_real_handwritten_files_agree(real_file):
    """SOURCES.md: handwritten_6views rows are rows of handwritten.mat, and gt - 1 == Y."""
    pre = read_file(real_file("handwritten", "handwritten_6views.mat"))
    whole = read_file(real_file("handwritten", "handwritten.mat"))
    keys = {r.tobytes(): i for i, r in enumerate(np.concatenate(whole.views, 1))}
    rows = np.array([keys[r.tobytes()] for r in np.concatenate(pre.views, 1)])
    np.testing.assert_array_equal(pre.y, whole.y[rows])
    assert [v.shape[1] for v in pre.views] == [240, 76, 216, 47, 64, 6]
