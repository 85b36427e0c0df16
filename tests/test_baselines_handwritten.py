"""Every baseline learns well beyond chance (10%) on the real Handwritten data within a few epochs."""

from pathlib import Path

import pytest
import pytorch_lightning as pl
from conftest import data_dir, data_missing
from hydra.utils import instantiate
from omegaconf import OmegaConf

from datamodules.features import FeatureDataModule


@pytest.fixture(scope="module")
def handwritten():
    """The pre-split 1600/400 file through the framework's datamodule (min-max scaled on train)."""
    root = data_dir()
    if root is None or not (root / "handwritten" / "handwritten_6views.mat").exists():
        data_missing(f"handwritten_6views.mat not in {root}/handwritten; set MNP_DATA_DIR to the data folder")
    dm = FeatureDataModule(dataset="handwritten", data_dir=str(root), download=False, batch_size=200)
    dm.setup()
    return dm


CONF = Path(__file__).resolve().parents[1] / "conf" / "model"
# model config -> (overrides that only make the test quicker, epochs)
CASES = {
    "mcd": ({"mc_samples": 20}, 3),
    "de_ef": ({}, 3),
    "de_lf": ({}, 3),
    "sngp": ({}, 3),
    "etp": ({}, 5),
    "tmc": ({}, 5),
    "mgp": ({"num_inducing": 50, "mc_samples": 20}, 4),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_learns_handwritten(handwritten, name):
    """The shipped conf/model/<name>.yaml, instantiated as the pipeline does, learns in a few epochs."""
    pl.seed_everything(0, verbose=False)
    overrides, epochs = CASES[name]
    node = OmegaConf.load(CONF / f"{name}.yaml")
    assert node.pop("name") == name
    model = instantiate(
        node, num_classes=handwritten.num_classes, view_dims=handwritten.view_dims, _convert_="all", **overrides
    )
    trainer = pl.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
    )
    trainer.fit(model, datamodule=handwritten)
    probs, unc = model.predict_tensors(handwritten.test_views)
    acc = (probs.argmax(-1) == handwritten.test_y).float().mean().item()
    assert acc > 0.85, f"{name}: test accuracy {acc:.3f} after {epochs} epochs"
    assert unc.shape == (len(handwritten.test_y),) and bool(unc.isfinite().all())
