"""The cifar10c datamodule on tiny generated feature caches: views, scaling, OOD sets, AUROC direction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from datamodules import feature_cache as F
from datamodules.cifar10c import CIFAR10C
from datamodules.errors import DataError
from mnp.eval.eval_protocol import EvalProtocol
from mnp.eval.metrics import auroc
from mnp.framework.routine import Routine

CONF = Path(__file__).resolve().parents[1] / "conf"
CORR, SEV = ["gaussian_noise", "shot_noise", "impulse_noise"], [1, 3, 5]
IMAGENET = {"weights": "IMAGENET1K_V1", "input_size": 299}


def write_cache(root: Path, n_train=60, n_test=40, n_ood=None, d=6, label_repeats=1, weights="IMAGENET1K_V1"):
    """Class-dependent ID features per view; OOD features shifted by +5. Returns the raw arrays."""
    n_ood = n_ood or {"svhn": 50, "cifar100": 30}
    rng = np.random.default_rng(0)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        y = np.arange(n) % 10
        F.save_npy(F.labels_path(root, split), np.tile(y, label_repeats))
        out[f"{split}_y"] = y
        for v, (c, s) in enumerate(zip(CORR, SEV)):
            x = (rng.normal(size=(n, d)) + 2.0 * np.eye(10, d)[y] + v).astype(np.float32)
            F.save_npy(F.feature_path(root, split, c, s), x)
            out[f"{split}_{v}"] = x
    for name, n in n_ood.items():
        out[name] = (rng.normal(size=(n, d)) + 5.0).astype(np.float32)
        F.save_npy(F.ood_feature_path(root, name), out[name])
    F.update_cache_meta(root, {"extractor": F.inception_description(weights, 299, 0)}, {})
    return out


def datamodule(root, **kw) -> CIFAR10C:
    kw.setdefault("extractor", IMAGENET)
    dm = CIFAR10C(str(root), CORR, SEV, **kw)
    dm.setup()
    return dm


def rows_in(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Index into b of each row of a (asserting it is there)."""
    idx = [int(np.flatnonzero((b == r).all(1))[0]) for r in a]
    return np.asarray(idx)


def test_views_labels_and_train_standardisation(tmp_path):
    raw = write_cache(tmp_path)
    dm = datamodule(tmp_path, ood_n_id=20, ood_n_ood=25)
    assert dm.view_dims == [6, 6, 6] and dm.num_classes == 10 and len(dm.train_y) == 60 and len(dm.test_y) == 40
    np.testing.assert_array_equal(dm.test_y.numpy(), raw["test_y"])
    for v in range(3):
        tr = dm.train_views[v].double().numpy()
        np.testing.assert_allclose(tr.mean(0), 0, atol=1e-5)
        np.testing.assert_allclose(tr.std(0), 1, atol=1e-5)
        mu, sd = raw[f"train_{v}"].astype(np.float64).mean(0), raw[f"train_{v}"].astype(np.float64).std(0)
        np.testing.assert_allclose(dm.test_views[v].numpy(), (raw[f"test_{v}"] - mu) / sd, atol=1e-5)


def test_ood_sets_drawn_without_replacement_and_copied_into_every_view(tmp_path):
    raw = write_cache(tmp_path)
    dm = datamodule(tmp_path, ood_n_id=20, ood_n_ood=25, scaling="none")
    assert dm.ood_names == ["svhn", "cifar100"]
    id_rows = {}
    for name, n_ood in (("svhn", 25), ("cifar100", 25)):
        views, is_ood = dm.ood_sets[name]
        assert is_ood.tolist() == [0] * 20 + [1] * n_ood
        ood = [v[20:].numpy() for v in views]
        for v in ood[1:]:
            np.testing.assert_array_equal(v, ood[0])  # the same OOD feature in all three views
        src = rows_in(ood[0], raw[name])
        assert len(set(src.tolist())) == n_ood  # no duplicates
        ids = rows_in(views[0][:20].numpy(), raw["test_0"])
        assert len(set(ids.tolist())) == 20
        for v in (1, 2):  # ID rows stay aligned across views
            np.testing.assert_array_equal(views[v][:20].numpy(), raw[f"test_{v}"][ids])
        id_rows[name] = ids
    np.testing.assert_array_equal(id_rows["svhn"], id_rows["cifar100"])  # one shared ID half


def test_caps_are_5000_plus_5000_and_shrink_on_small_data(tmp_path):
    big = tmp_path / "big"
    raw = write_cache(big, n_train=20, n_test=6000, n_ood={"svhn": 7000, "cifar100": 5000}, d=3)
    dm = datamodule(big, scaling="none")
    views, is_ood = dm.ood_sets["svhn"]
    assert int((is_ood == 0).sum()) == 5000 and int(is_ood.sum()) == 5000
    assert len(np.unique(views[0][:5000].numpy(), axis=0)) == 5000
    assert len(np.unique(views[0][5000:].numpy(), axis=0)) == 5000
    assert len(np.unique(rows_in(views[0][5000:5100].numpy(), raw["svhn"]))) == 100
    small = tmp_path / "small"
    write_cache(small)
    views, is_ood = datamodule(small).ood_sets["svhn"]
    assert int((is_ood == 0).sum()) == 40 and int(is_ood.sum()) == 50


def test_official_label_files_repeat_once_per_severity(tmp_path):
    raw = write_cache(tmp_path, label_repeats=5)
    np.testing.assert_array_equal(datamodule(tmp_path).train_y.numpy(), raw["train_y"])
    F.save_npy(F.labels_path(tmp_path, "test"), np.arange(41))
    with pytest.raises(DataError, match="41 labels for 40 feature rows"):
        datamodule(tmp_path)


def test_missing_features_name_the_build_command(tmp_path):
    with pytest.raises(DataError) as e:
        datamodule(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "python -m mnp.tools.build_features" in msg and "dataset.severities=[1,3,5]" in msg


def test_features_from_another_extractor_are_refused(tmp_path):
    write_cache(tmp_path, weights=None)
    with pytest.raises(DataError, match="dataset.extractor"):
        datamodule(tmp_path)
    assert len(datamodule(tmp_path, extractor={"weights": None, "input_size": 299}).train_y) == 60


def test_official_scaling_standardises_ood_with_its_own_statistics(tmp_path):
    write_cache(tmp_path)
    views, is_ood = datamodule(tmp_path, scale_test_separately=True, ood_n_ood=None).ood_sets["svhn"]
    ood = views[0][is_ood == 1].double()
    np.testing.assert_allclose(ood.mean(0).numpy(), 0, atol=1e-5)
    np.testing.assert_allclose(ood.std(0, unbiased=False).numpy(), 1, atol=1e-5)
    shifted = datamodule(tmp_path, ood_n_ood=None).ood_sets["svhn"][0][0][is_ood == 1]
    assert shifted.mean() > 2  # with train statistics the +5 shift stays visible


class DistanceModel(Routine):
    """Uniform predictions; uncertainty = ± distance from the training mean (standardised features)."""

    def __init__(self, num_classes, view_dims, sign: float = 1.0):
        super().__init__(num_classes, view_dims)
        self.sign = sign

    def predict(self, views):
        b = views[0].shape[0]
        probs = torch.full((1, b, self.num_classes), 1.0 / self.num_classes, device=views[0].device)
        return probs, self.sign * torch.cat(views, -1).norm(dim=-1)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_ood_is_the_positive_class_of_the_auroc(tmp_path, sign):
    write_cache(tmp_path)
    dm = datamodule(tmp_path, ood_n_id=30, ood_n_ood=30)
    views, is_ood = dm.ood_sets["svhn"]
    direct = auroc(sign * torch.cat(views, -1).norm(dim=-1), is_ood)
    model = DistanceModel(dm.num_classes, dm.view_dims, sign)
    model.configure_evaluation(EvalProtocol(noise=False))
    trainer = pl.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.test(model, datamodule=dm, verbose=False)
    for name in ("svhn", "cifar100"):
        got = model.test_results[f"ood/{name}/auroc"]
        assert (got > 0.95) if sign > 0 else (got < 0.05)  # higher uncertainty on OOD -> AUROC > 0.5
    assert model.test_results["ood/svhn/auroc"] == pytest.approx(direct)


def test_dataset_config_instantiates(tmp_path):
    from hydra import compose, initialize_config_dir

    from mnp.cli.builders import build_datamodule

    write_cache(tmp_path)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=["dataset=cifar10c", "model=mlp", f"dataset.feature_dir={tmp_path}", "dataset.ood_n_id=10"],
        )
    name, dm = build_datamodule(cfg)
    assert name == "cifar10c" and dm.scaling == "standard" and dm.view_dims == [6, 6, 6]
    assert {k: int(v[1].sum()) for k, v in dm.ood_sets.items()} == {"svhn": 50, "cifar100": 30}


@pytest.mark.slow
def test_the_feature_cache_command_finds_its_config():
    """`python -m mnp.tools.build_features` composes conf/features/cifar10c.yaml from the repository's conf/."""
    import subprocess
    import sys

    from cfg_utils import ROOT

    res = subprocess.run(
        [sys.executable, "-m", "mnp.tools.build_features", "--cfg", "job"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "feature_dir" in res.stdout
