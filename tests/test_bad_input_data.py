"""Every kind of bad input raises a one-line DataError that names what is wrong (or, for duplicates,
logs a warning with the count): missing, damaged or mis-shaped files, NaN/inf, bad labels and split indices,
what a file that is no data file is, and files too large for memory (labels, empty test splits, scaling,
complex views and config values: tests/test_bad_input_data_values.py)."""

import logging
import re
import time
import zipfile

import h5py
import numpy as np
import pytest
import scipy.io
from zip_utils import deflate_bomb

from datamodules import TensorDataModule
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


@pytest.mark.parametrize("content", [b"x1,x2,y\n1,2,0\n", b"PK\x03\x04 a zip archive renamed"], ids=["csv", "zip"])
def test_a_file_named_mat_that_is_no_mat_file_says_so(tmp_path, content):
    path = tmp_path / "data.mat"
    path.write_bytes(content)
    msg = error_of(custom(path))
    assert msg.startswith(f"{path}: not a MATLAB .mat file (no 'MATLAB 5.0 MAT-file' header, not HDF5/v7.3)")
    assert "scipy.io.savemat" in msg and "\n" not in msg


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
    scipy.io.savemat(
        path,
        {
            "x1_train": np.ones((4, 3)),
            "x1_test": np.ones((2, 5)),
            "gt_train": [[1], [2], [1], [2]],
            "gt_test": [[1], [2]],
        },
    )
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


@pytest.mark.parametrize(
    "train,test,expected",
    [
        (np.arange(30), np.arange(24, 36), "6 samples are in both the train and test indices (e.g. 24)"),
        (
            np.arange(-6, 30),
            np.arange(30, 36),
            "train indices span -6..29 but there are 36 samples (expected 0-based "
            "indices in 0..35; a negative one is not counted from the end)",
        ),
        (
            np.arange(30),
            np.repeat(np.arange(30, 36), 5),
            "6 samples occur more than once in the test indices (e.g. 30, 5 times); give each sample once",
        ),
        (np.arange(30), np.arange(30, 40), "test indices span 30..39 but there are 36 samples"),
        (np.arange(36) < 30, np.arange(30, 36), "train indices must be integers, got dtype bool"),
        (np.arange(30), np.arange(30.0, 36.0), "test indices must be integers, got dtype float64"),
        (np.arange(30), None, "give both train_idx and test_idx, or neither"),
        (None, np.arange(30, 36), "give both train_idx and test_idx, or neither"),
    ],
)
def test_an_in_memory_split_is_checked_as_a_file_split(tmp_path, tiny_views, train, test, expected):
    """TensorDataModule used to train on test rows (overlap, negative indices wrapping round), count repeated
    test rows several times, or fail with a TypeError; it now refuses what a .npz split refuses, with the same
    message (datamodules.checks.split_indices)."""
    views, y = tiny_views
    msg = error_of(lambda: TensorDataModule(views, y, train, test))
    assert msg.startswith(f"<memory>: {expected}"), msg
    given = {k: v for k, v in (("train_idx", train), ("test_idx", test)) if v is not None}
    path = npz(tmp_path, x1=views[0], x2=views[1], y=y, **given)
    assert error_of(custom(path)) == msg.replace("<memory>", str(path))


def test_a_constant_view_trains_with_one_warning_naming_it(tiny_views, caplog):
    """docs/reliability.md promised a warning for a constant view; there was none. A view constant in some
    columns only, or in the training rows only, carries information and gets no warning."""
    views, y = tiny_views
    partly = views[0].copy()
    partly[:, 1] = 4.0
    train_only = views[1].copy()
    train_only[np.arange(0, 36, 2)] = 1.0
    data = [partly, np.full((36, 3), -2.5), train_only, np.zeros((36, 2))]
    with caplog.at_level(logging.WARNING, logger="datamodules.checks"):
        dm = TensorDataModule(data, y, np.arange(0, 36, 2), np.arange(1, 36, 2))
        dm.setup()
    said = [r.getMessage() for r in caplog.records if r.name == "datamodules.checks"]
    assert said == [
        "<memory>: view 2 (3 columns) is constant (all 36 rows the same): it carries no information, "
        "so the model learns nothing from it; it is kept",
        "<memory>: view 4 (2 columns) is all zero: it carries no information, so the model learns "
        "nothing from it; it is kept",
    ]
    assert dm.view_dims == [5, 3, 3, 2]  # kept


def test_duplicated_samples_are_kept_with_a_warning(tmp_path, tiny_views, caplog):
    """Decision: exact duplicates (equal in every view) are kept; a warning names their count and how
    many straddle the train/test split (real files have some: handwritten 6, scene15 18)."""
    views, y = tiny_views
    x1, x2 = views[0].copy(), views[1].copy()
    x1[[1, 2]], x2[[1, 2]] = x1[0], x2[0]  # rows 1, 2 duplicate row 0
    x2[3] = x2[0]  # equal in one view only: not a duplicate sample
    path = npz(tmp_path, x1=x1, x2=x2, y=y, train_idx=np.arange(2, 36), test_idx=np.arange(2))
    with caplog.at_level(logging.WARNING):
        dm = CustomDataModule(str(path))
        dm.setup()
    assert len(dm.train_y) + len(dm.test_y) == 36
    warning = [r.getMessage() for r in caplog.records if "duplicate" in r.getMessage()]
    assert len(warning) == 1
    assert re.search(
        r"2 samples duplicate an earlier sample in every view \(2 of the 2 test rows equal a training "
        r"row, so the test scores are inflated by that leakage\)",
        warning[0],
    )


# ---------------------------------------------------------------------------- what the file is
def test_object_array_is_named_as_such(tmp_path, tiny_views):
    views, y = tiny_views
    x1 = views[0].astype(object)
    path = tmp_path / "obj.npz"
    np.savez(path, x1=x1, y=y)  # pickled
    msg = error_of(custom(path))
    assert msg == f"{path}: x1 holds Python objects (dtype object); save numeric arrays"


@pytest.mark.parametrize(
    "content,expected",
    [
        (
            b"x1,x2,y\n1,2,0\n",
            "the format could not be recognised (not a zip archive, so not an .npz); accepted: "
            ".npz written by numpy.savez with x1..xM and y, or .mat in MATLAB v5 or v7.3/HDF5 format",
        ),
        (b"", "the format could not be recognised"),
        (
            "npy",
            "is a single .npy array, not an .npz archive; "
            "save the arrays with numpy.savez(path, x1=..., x2=..., y=...)",
        ),
    ],
)
def test_file_that_is_not_an_npz_archive(tmp_path, content, expected):
    path = tmp_path / "data.npz"
    if content == "npy":
        with open(path, "wb") as f:
            np.save(f, np.ones((3, 2)))
    else:
        path.write_bytes(content)
    msg = error_of(custom(path))
    assert msg.startswith(f"{path}: {expected}") and "pickled" not in msg and "corrupt" not in msg


def test_directory_as_path(tmp_path):
    msg = error_of(custom(tmp_path))
    assert msg.startswith(f"{tmp_path} is a directory, not a data file; accepted: .npz") and "not found" not in msg


# ---------------------------------------------------------------------------- memory
def test_deflate_bomb_refused_from_zip_directory(tmp_path, monkeypatch):
    """4 GB of zeros in 4 MB on disk: refused from the sizes in the zip directory and the .npy header,
    before anything is inflated (the full inflate took 40 s and 4 GB)."""
    path = tmp_path / "bomb.npz"
    deflate_bomb(path, rows=500_000_000, y=np.arange(300) % 3)
    assert path.stat().st_size < 5e6 and zipfile.ZipFile(path).getinfo("x1.npy").file_size > 4e9
    monkeypatch.setattr("datamodules.npz.available_memory", lambda: 8e9)  # the same on every machine
    t0 = time.perf_counter()
    msg = error_of(custom(path))
    assert time.perf_counter() - t0 < 2
    assert (
        msg == f"{path}: loading x1 would take the arrays to 4.0 GB in memory, over 25% of the 8.0 GB "
        "available; use a smaller file or free memory"
    )


def test_declared_size_counts_as_float64_and_small_files_pass(tmp_path, monkeypatch, tiny_views):
    """A header declaring 2⁴⁰ rows (8.8 TB as float64) is refused on any machine; a small file passes
    under a tight limit (1 MB available: 250 kB for the arrays)."""
    bomb = tmp_path / "declared.npz"
    deflate_bomb(bomb, rows=1000, declared_rows=2**40, y=np.arange(3))
    msg = error_of(custom(bomb))
    assert msg.startswith(f"{bomb}: loading x1 would take the arrays to 8796.1 GB in memory, over 25% of the ")
    views, y = tiny_views
    monkeypatch.setattr("datamodules.npz.available_memory", lambda: 1e6)
    dm = CustomDataModule(str(npz(tmp_path, x1=views[0], x2=views[1], y=y)))
    dm.setup()
    assert dm.view_dims == [5, 3]
    monkeypatch.setattr("datamodules.npz.available_memory", lambda: 4e3)  # 1 kB for the arrays: x1 takes 1.6 kB
    assert (
        error_of(custom(tmp_path / "bad.npz")) == f"{tmp_path / 'bad.npz'}: loading x1 would take the arrays to "
        "1.6 kB in memory, over 25% of the 4.0 kB available; use a smaller file or free memory"
    )
