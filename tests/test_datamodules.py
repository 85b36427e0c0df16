"""Feature datamodules on the real files (docs/method.md §4), scaling from the training split, held-out-class OOD,
tiny generated caltech101/hmdb/custom files, and the MLP learning handwritten end to end."""

import logging
import os

import numpy as np
import pytest
import scipy.io
import torch
from mat_utils import cell

from datamodules.custom import CustomDataModule
from datamodules.features import FeatureDataModule

SPEC4 = {  # name: (default file, N, view dims, K, n_test)
    "handwritten": ("handwritten_6views.mat", 2000, [240, 76, 216, 47, 64, 6], 10, 400),
    "cub": ("cub_googlenet_doc2vec_c10.mat", 600, [1024, 300], 10, 120),
    "pie": ("PIE_face_10.mat", 680, [484, 256, 279], 68, 136),
    "scene15": ("scene15_mtv.mat", 4485, [20, 59, 40], 15, 897),
}


def real_dm(real_file, name, **kw):
    path = real_file(name, kw.get("file") or SPEC4[name][0])
    return FeatureDataModule(name, str(path.parent.parent), **kw)


@pytest.mark.parametrize("name", list(SPEC4))
def test_real_dataset_matches_spec(name, real_file):
    _, n, dims, k, n_test = SPEC4[name]
    dm = real_dm(real_file, name)
    dm.setup()
    assert dm.view_dims == dims and dm.num_classes == k
    assert len(dm.train_y) + len(dm.test_y) == n and len(dm.test_y) == n_test
    assert sorted(dm.train_y.unique().tolist()) == list(range(k))  # 0-based, every class trained
    assert dm.test_y.min() >= 0 and dm.test_y.max() < k
    assert len(np.intersect1d(dm.train_idx, dm.test_idx)) == 0


def test_pie_test_labels_and_rows_follow_the_index_files(real_file):
    dm = real_dm(real_file, "pie", scaling="none")
    dm.setup()
    d = scipy.io.loadmat(real_file("pie", "PIE_face_10.mat"))
    test_idx = np.load(real_file("pie", "PIE_face_10_test_idx.npy"))
    assert 1 not in d["gt"].ravel()[test_idx]  # the trap: no class-1 test sample
    np.testing.assert_array_equal(dm.test_y.numpy(), d["gt"].ravel()[test_idx].astype(int) - 1)
    np.testing.assert_allclose(dm.test_views[2].numpy(), d["X"][0, 2].T[test_idx], rtol=1e-6)


def test_handwritten_default_split_is_the_files_stratified_one(real_file):
    dm = real_dm(real_file, "handwritten")
    dm.setup()
    np.testing.assert_array_equal(np.bincount(dm.train_y.numpy()), [160] * 10)
    np.testing.assert_array_equal(np.bincount(dm.test_y.numpy()), [40] * 10)


def test_handwritten_mat_uses_trust4conflict_index_files(real_file):
    dm = real_dm(real_file, "handwritten", file="handwritten.mat")
    dm.setup()
    np.testing.assert_array_equal(dm.test_idx, np.load(real_file("handwritten", "handwritten_test_idx.npy")))
    np.testing.assert_array_equal(dm.train_idx, np.load(real_file("handwritten", "handwritten_train_idx.npy")))


def test_stratified_split_from_the_seed(real_file):
    a, b, c = (real_dm(real_file, "cub", split="stratified", seed=s) for s in (0, 0, 1))
    for dm in (a, b, c):
        dm.setup()
    np.testing.assert_array_equal(a.test_idx, b.test_idx)
    assert not np.array_equal(a.test_idx, c.test_idx)
    np.testing.assert_array_equal(np.bincount(a.test_y.numpy()), [12] * 10)


def test_minmax_statistics_come_from_the_training_split_only(real_file):
    dm = real_dm(real_file, "pie", scaling="minmax")
    dm.setup()
    for tr, te in zip(dm.train_views, dm.test_views):
        varying = (tr.max(0).values - tr.min(0).values) > 0
        assert tr.min() == 0 and tr[:, varying].max(0).values.eq(1).all()
        assert te.min() < 0 or te.max() > 1  # unseen test rows fall outside [0, 1]
    own = real_dm(real_file, "pie", scaling="minmax", scale_test_separately=True)
    own.setup()
    for te in own.test_views:
        assert te.min() == 0 and te.max() == 1


@pytest.mark.parametrize("key", FeatureDataModule.TEST_ONLY)
def test_a_test_only_setting_leaves_training_and_validation_rows_alone(real_file, key):
    """What the selection protocol relies on to leave these keys out of a rival's setting (mnp.tools.select)."""
    plain, flipped = (real_dm(real_file, "pie", val_fraction=0.2, **{key: v}) for v in (False, True))
    for dm in (plain, flipped):
        dm.setup()
    for part in ("train_views", "val_views"):
        for a, b in zip(getattr(plain, part), getattr(flipped, part)):
            assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(plain.test_views, flipped.test_views))


def test_standard_scaling_from_train_is_scene15s_default(real_file):
    dm = real_dm(real_file, "scene15")  # docs/method.md §2: standard scaling for scene15
    dm.setup()
    for tr, te in zip(dm.train_views, dm.test_views):
        np.testing.assert_allclose(tr.double().mean(0).numpy(), 0, atol=1e-5)
        np.testing.assert_allclose(tr.double().std(0, unbiased=False).numpy(), 1, atol=1e-4)
        assert abs(te.double().mean(0)).max() > 1e-3  # the test split has its own, different moments


def test_heldout_class_ood_on_handwritten(real_file):
    dm = real_dm(real_file, "handwritten", ood_classes=[0, 1], scaling="none")
    dm.setup()
    assert dm.num_classes == 8 and sorted(dm.train_y.unique().tolist()) == list(range(8))
    d = scipy.io.loadmat(real_file("handwritten", "handwritten_6views.mat"))
    gt_test = d["gt_test"].ravel().astype(int) - 1
    np.testing.assert_array_equal(dm.test_y.numpy(), gt_test[gt_test >= 2] - 2)  # 2..9 -> 0..7
    views, is_ood = dm.ood_sets["heldout"]
    assert len(is_ood) == 320 + 400 and int(is_ood.sum()) == 400  # kept test + all 400 samples of classes 0, 1
    assert is_ood[:320].eq(0).all() and is_ood[320:].eq(1).all()
    x1 = np.concatenate([d["x1_train"], d["x1_test"]]).astype(float)
    gt = np.concatenate([d["gt_train"], d["gt_test"]]).ravel() - 1
    np.testing.assert_array_equal(np.sort(views[0][320:].numpy(), 0), np.sort(x1[gt < 2], 0))


# ---------------------------------------------------------------------------- generated files
def test_caltech101_format_through_the_datamodule(tmp_path, tiny_views):
    """A tiny file in the caltech101 layout (X cell, features × samples, gt 1-based), read as custom data."""
    views, y = tiny_views
    path = tmp_path / "caltech.mat"
    scipy.io.savemat(path, {"X": cell([v.T for v in views]), "gt": (y + 1)[:, None].astype(np.uint8)})
    dm = CustomDataModule(str(path), scaling="none", seed=0)
    dm.setup()
    assert dm.view_dims == [5, 3] and dm.num_classes == 3
    np.testing.assert_allclose(dm.train_views[0].numpy(), views[0][dm.train_idx], rtol=1e-6)
    np.testing.assert_array_equal(dm.test_y.numpy(), y[dm.test_idx])


def test_hmdb_registered_dataset_reads_a_v73_file(tmp_path, monkeypatch):
    """An HDF5 file with hmdb's keys in <data_dir>/hmdb/ passes the registry checks (N, K) and
    uses the index files; the registry is shrunk to the tiny file's size."""
    from dataclasses import replace

    import h5py

    from datamodules import features, sources

    rng = np.random.default_rng(0)
    n, k = 60, 3
    y = np.arange(n) % k
    x = [rng.normal(size=(n, 4)) + y[:, None], rng.normal(size=(n, 2)) + y[:, None]]
    (tmp_path / "hmdb").mkdir()
    with h5py.File(tmp_path / "hmdb" / "HMDB51_HOG_MBH.mat", "w") as f:
        f["x1"], f["x2"], f["gt"] = x[0].T, x[1].T, (y + 1)[None, :].astype(float)
    np.save(tmp_path / "hmdb" / "HMDB51_HOG_MBH_train_idx.npy", np.arange(12, n))
    np.save(tmp_path / "hmdb" / "HMDB51_HOG_MBH_test_idx.npy", np.arange(12))
    index = (sources.DataFile("HMDB51_HOG_MBH_train_idx.npy"), sources.DataFile("HMDB51_HOG_MBH_test_idx.npy"))
    spec = replace(
        sources.DATASETS["hmdb"], n=n, view_dims=(4, 2), num_classes=k, split_files={"HMDB51_HOG_MBH.mat": index}
    )  # no sha256 for these fake index files
    monkeypatch.setitem(features.DATASETS, "hmdb", spec)
    dm = FeatureDataModule("hmdb", str(tmp_path), scaling="none", download=False)
    dm.setup()
    np.testing.assert_array_equal(dm.test_idx, np.arange(12))
    np.testing.assert_allclose(dm.test_views[1].numpy(), x[1][:12], rtol=1e-6)
    np.testing.assert_array_equal(dm.test_y.numpy(), y[:12])


def test_custom_npz_with_and_without_its_split(tmp_path, tiny_views):
    views, y = tiny_views
    path = tmp_path / "mine.npz"
    np.savez(path, x1=views[0], x2=views[1], y=y, train_idx=np.arange(6, 36), test_idx=np.arange(6))
    dm = CustomDataModule(str(path))
    dm.setup()
    np.testing.assert_array_equal(dm.test_idx, np.arange(6))
    strat = CustomDataModule(str(path), split="stratified")
    strat.setup()
    np.testing.assert_array_equal(np.bincount(strat.test_y.numpy()), [2, 2, 2])  # 20% of 12 per class


def test_one_line_says_what_was_loaded_and_one_based_labels_warn(tmp_path, tiny_views, caplog):
    views, y = tiny_views
    path = tmp_path / "mine.npz"
    np.savez(path, x1=views[0], x2=views[1], y=y + 1, train_idx=np.arange(6, 36), test_idx=np.arange(6))
    with caplog.at_level(logging.INFO):
        CustomDataModule(str(path)).setup()
        CustomDataModule(str(path), split="stratified", val_fraction=0.2).setup()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        warnings == [f"{path}: labels are 1-based (1..3); they are renumbered 0..2, the labels of predictions.npz"] * 2
    )
    loaded = [r.getMessage() for r in caplog.records if r.getMessage().startswith("loaded ")]
    assert loaded == [
        f"loaded {path}: 30 train / 6 test rows, 2 views of dims [5, 3], 3 classes (1-based in the "
        "file, renumbered from 0); split: the file's train_idx / test_idx",
        f"loaded {path}: 24 train / 6 test rows / 6 validation, 2 views of dims [5, 3], 3 classes "
        "(1-based in the file, renumbered from 0); split: drawn per class from seed 0 "
        "(dataset.test_fraction=0.2)",
    ]


def test_the_papers_one_based_files_load_without_a_warning(real_file, caplog):
    with caplog.at_level(logging.INFO):
        real_dm(real_file, "cub").setup()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "10 classes (1-based in the file, renumbered from 0); split: the index files" in caplog.text


# ---------------------------------------------------------------------------- configs and end to end
@pytest.mark.parametrize("name", ["handwritten", "cub", "pie", "caltech101", "scene15", "hmdb", "custom"])
def test_dataset_configs_instantiate_with_spec_scaling(name, tmp_path):
    from cfg_utils import compose_train
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = compose_train(
        tmp_path,
        [
            f"dataset={name}",
            "model=mlp",
            f"paths.data_dir={tmp_path}",
            "seed=7",
            f"dataset.path={tmp_path}/x.npz" if name == "custom" else "dataset.batch_size=200",
        ],
    )
    node = OmegaConf.to_container(cfg.dataset, resolve=True)
    assert node.pop("name") == name
    dm = instantiate(node)
    assert dm.seed == 7 and dm.batch_size == 200 and dm.val_fraction == 0 and dm.ood_classes == []
    want = {"handwritten": "minmax", "cub": "minmax", "pie": "minmax", "custom": "standard"}
    assert dm.scaling == want.get(name, "standard")  # docs/method.md §2
    if name != "custom":
        assert dm.data_dir == str(tmp_path) and dm.split == "files"


# ---------------------------------------------------------------------------- end to end
def test_mlp_learns_handwritten(tmp_path, real_file):
    """`python train.py model=mlp dataset=handwritten trainer.max_epochs=5` reaches >= 95% test accuracy."""
    from cfg_utils import compose_train

    from mnp.cli.pipeline import train

    data_dir = real_file("handwritten", "handwritten_6views.mat").parent.parent
    os.environ.setdefault("WANDB_MODE", "disabled")
    cfg = compose_train(
        tmp_path,
        [
            "model=mlp",
            "dataset=handwritten",
            "trainer.max_epochs=5",
            f"paths.data_dir={data_dir}",
            "eval.noise=false",
            "trainer.accelerator=cpu",
        ],
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 2-core machine shared by several jobs: extra threads only contend
    try:
        metrics = train(cfg)
    finally:
        torch.set_num_threads(threads)
    assert metrics["dataset"] == "handwritten" and metrics["epochs"] == 5
    assert metrics["test/acc"] >= 0.95
