"""Every kind of bad input raises a one-line DataError that names what is wrong (or, for duplicates,
logs a warning with the count)."""
import logging
import re

import h5py
import numpy as np
import pytest
import scipy.io

from datamodules.custom import CustomDataModule
from datamodules.errors import DataError
from datamodules.features import FeatureDataModule


def error_of(make) -> str:
    with pytest.raises(DataError) as e:
        make().setup()
    msg = str(e.value)
    assert "\n" not in msg and msg
    return msg


def npz(tmp_path, name="bad.npz", **arrays):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def custom(path, **kw):
    return lambda: CustomDataModule(str(path), **kw)


def cell(arrays):
    c = np.empty((1, len(arrays)), dtype=object)
    for i, a in enumerate(arrays):
        c[0, i] = a
    return c


def test_missing_registered_file_names_file_and_directory(tmp_path):
    msg = error_of(lambda: FeatureDataModule("pie", str(tmp_path), download=False))
    assert "PIE_face_10.mat" in msg and f"{tmp_path}/pie/" in msg


def test_missing_custom_file(tmp_path):
    msg = error_of(custom(tmp_path / "nope.npz"))
    assert msg == f"nope.npz not found in {tmp_path}/"


def test_checksum_mismatch_of_a_registered_file(tmp_path):
    (tmp_path / "cub").mkdir()
    (tmp_path / "cub" / "cub_googlenet_doc2vec_c10.mat").write_bytes(b"\0" * 100)
    msg = error_of(lambda: FeatureDataModule("cub", str(tmp_path)))
    assert "cub_googlenet_doc2vec_c10.mat: sha256 mismatch" in msg
    assert "3ab7dc9917c520e6931fa3338cb9c6e8b2f6a4050ca8a25c97360e87d7bbfc3a" in msg


def test_wrong_shapes_for_a_registered_dataset(tmp_path, tiny_views):
    views, y = tiny_views
    (tmp_path / "pie").mkdir()
    scipy.io.savemat(tmp_path / "pie" / "PIE_face_10.mat", {"X": cell(views), "gt": y[:, None] + 1})
    msg = error_of(lambda: FeatureDataModule("pie", str(tmp_path), checksum=False))
    assert "pie should have 680 samples, the file has 36" in msg


@pytest.mark.parametrize("kind", ["mat", "npz", "hdf5"])
def test_truncated_files(tmp_path, tiny_views, kind):
    views, y = tiny_views
    path = tmp_path / f"data.{'npz' if kind == 'npz' else 'mat'}"
    if kind == "mat":
        scipy.io.savemat(path, {"X": cell(views), "gt": y[:, None] + 1}, do_compression=True)
    elif kind == "npz":
        np.savez_compressed(path, x1=views[0], x2=views[1], y=y)
    else:
        with h5py.File(path, "w") as f:
            f["x1"], f["gt"] = views[0].T, y[None, :] + 1.0
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    msg = error_of(custom(path))
    assert msg.startswith(f"{path}: file is corrupt or truncated") and msg.endswith("re-download or replace it")


def test_nan_or_inf_names_view_and_row(tmp_path, tiny_views):
    views, y = tiny_views
    x2 = views[1].copy()
    x2[7, 1] = np.inf
    msg = error_of(custom(npz(tmp_path, x1=views[0], x2=x2, y=y)))
    assert "view 2" in msg and "row 7" in msg and "NaN/inf" in msg


def test_view_with_zero_columns(tmp_path, tiny_views):
    views, y = tiny_views
    msg = error_of(custom(npz(tmp_path, x1=views[0], x2=np.zeros((36, 0)), y=y)))
    assert "view 2 has zero feature columns" in msg


def test_non_integer_labels(tmp_path, tiny_views):
    views, y = tiny_views
    msg = error_of(custom(npz(tmp_path, x1=views[0], y=y + 0.5)))
    assert "labels must be integers" in msg and "row 0" in msg


def test_negative_labels(tmp_path, tiny_views):
    views, y = tiny_views
    yy = y.copy()
    yy[4] = -1
    msg = error_of(custom(npz(tmp_path, x1=views[0], y=yy)))
    assert "labels must be non-negative (row 4 is -1)" in msg


def test_class_without_training_samples(tmp_path, tiny_views):
    views, y = tiny_views
    test = np.flatnonzero(y == 2)
    msg = error_of(custom(npz(tmp_path, x1=views[0], y=y, train_idx=np.flatnonzero(y < 2), test_idx=test)))
    assert "class(es) [2] have no training samples" in msg


def test_pre_split_train_test_dims_mismatch(tmp_path):
    path = tmp_path / "pre.mat"
    scipy.io.savemat(path, {"x1_train": np.ones((4, 3)), "x1_test": np.ones((2, 5)),
                            "gt_train": [[1], [2], [1], [2]], "gt_test": [[1], [2]]})
    msg = error_of(custom(path))
    assert "view 1 has 3 features in x1_train but 5 in x1_test" in msg


def test_mismatched_row_counts(tmp_path, tiny_views):
    views, y = tiny_views
    msg = error_of(custom(npz(tmp_path, x1=views[0], x2=views[1][:-1], y=y)))
    assert "view x2 has shape (35, 3); expected (36, d)" in msg
    path = tmp_path / "cells.mat"
    scipy.io.savemat(path, {"X": cell([views[0].T, views[1][:-1].T]), "gt": y[:, None] + 1})
    msg = error_of(custom(path))
    assert "view 2 has shape (3, 35) but there are 36 labels" in msg


def test_split_indices_out_of_range_or_overlapping(tmp_path, tiny_views):
    views, y = tiny_views
    msg = error_of(custom(npz(tmp_path, x1=views[0], y=y, train_idx=np.arange(30), test_idx=np.arange(30, 40))))
    assert "test indices span 30..39 but there are 36 samples" in msg
    msg = error_of(custom(npz(tmp_path, x1=views[0], y=y, train_idx=np.arange(30), test_idx=np.arange(29, 36))))
    assert "1 samples are in both the train and test indices (e.g. 29)" in msg


def test_duplicated_samples_are_kept_with_a_warning(tmp_path, tiny_views, caplog):
    """Decision: exact duplicates (equal in every view) are kept; a warning names their count and how
    many straddle the train/test split (real files have some: handwritten 6, scene15 18)."""
    views, y = tiny_views
    x1, x2 = views[0].copy(), views[1].copy()
    x1[[1, 2]], x2[[1, 2]] = x1[0], x2[0]  # rows 1, 2 duplicate row 0
    x2[3] = x2[0]  # equal in one view only: not a duplicate sample
    path = npz(tmp_path, x1=x1, x2=x2, y=y, train_idx=np.arange(2, 36), test_idx=np.arange(2))
    with caplog.at_level(logging.WARNING, logger="datamodules.features"):
        dm = CustomDataModule(str(path))
        dm.setup()
    assert len(dm.train_y) + len(dm.test_y) == 36
    warning = [r.getMessage() for r in caplog.records if "duplicate" in r.getMessage()]
    assert len(warning) == 1
    assert re.search(r"2 samples duplicate an earlier sample in every view \(1 across the train/test split\)",
                     warning[0])
