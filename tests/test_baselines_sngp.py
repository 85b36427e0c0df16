"""SNGP: Laplace precision reset per epoch, mean-field logits, Dempster-Shafer uncertainty."""

import math

import numpy as np
import pytorch_lightning as pl
import torch

from baselines.sngp import SNGP, dempster_shafer, mean_field_logits
from datamodules import TensorDataModule


def brute_variance(model: SNGP, phi: torch.Tensor, train_phi: torch.Tensor | None) -> torch.Tensor:
    """ridge · φᵀ (ridge·I + Φᵀ Φ)⁻¹ φ in float64."""
    p = model.ridge * torch.eye(phi.shape[1], dtype=torch.float64)
    if train_phi is not None:
        p = p + train_phi.double().t() @ train_phi.double()
    return model.ridge * (phi.double() * torch.linalg.solve(p, phi.double().t()).t()).sum(-1)


class PrecisionProbe(pl.Callback):
    def __init__(self):
        self.at_start, self.at_end = [], []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == 0:  # after the module's on_train_epoch_start, before any update
            self.at_start.append(pl_module.precision.clone())

    def on_train_epoch_end(self, trainer, pl_module):
        self.at_end.append(pl_module.precision.clone())


def test_precision_reset_every_epoch_in_a_real_fit():
    pl.seed_everything(0, verbose=False)
    rng = np.random.default_rng(0)
    views, y = [rng.normal(size=(60, 3)), rng.normal(size=(60, 2))], rng.integers(0, 3, 60)
    dm = TensorDataModule(views, y, np.arange(48), np.arange(48, 60), batch_size=16)
    model = SNGP(3, [3, 2], num_features=64, ridge=2.0, normalize_input=False)  # features fixed while training
    probe = PrecisionProbe()
    trainer = pl.Trainer(
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
        callbacks=[probe],
    )
    trainer.fit(model, datamodule=dm)
    eye = 2.0 * torch.eye(64)
    assert len(probe.at_start) == 3
    for p in probe.at_start:
        torch.testing.assert_close(p, eye)
    # each epoch's precision holds that epoch's data once: ridge·I + Φᵀ Φ over the 48 training rows
    with torch.no_grad():
        phi = model.features(dm.train_views).double()
    expected = eye.double() + phi.t() @ phi
    for p in probe.at_end:
        torch.testing.assert_close(p.double(), expected, rtol=1e-5, atol=1e-5)


def test_mean_field_logits_and_dempster_shafer():
    torch.manual_seed(0)
    model = SNGP(4, [5, 3], num_features=128, ridge=1.0)
    model.eval()
    views = [torch.randn(7, 5), torch.randn(7, 3)]
    with torch.no_grad():
        # before any data the precision is ridge·I, so σ² = ‖φ‖²
        phi = model.features(views)
        torch.testing.assert_close(model.predictive_variance(phi), phi.pow(2).sum(-1))
        train = [torch.randn(50, 5), torch.randn(50, 3)]
        train_phi = model.features(train)
        model.update_precision(train_phi)
        var = brute_variance(model, phi, train_phi).float()
        torch.testing.assert_close(model.predictive_variance(phi), var, rtol=1e-4, atol=1e-6)
        logits = model.beta(phi)
        probs, unc = model.predict(views)
    mf = logits / torch.sqrt(1 + math.pi / 8 * var)[:, None]
    torch.testing.assert_close(probs[0], mf.softmax(-1), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(unc, 4 / (4 + mf.exp().sum(-1)), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(
        mean_field_logits(torch.ones(1, 2) * 3, torch.tensor([8 / math.pi])), torch.ones(1, 2) * 3 / math.sqrt(2)
    )
    torch.testing.assert_close(dempster_shafer(torch.log(torch.tensor([[1.0, 2.0, 3.0]]))), torch.tensor([3 / 9]))


def test_momentum_update_is_a_moving_average():
    model = SNGP(2, [3], num_features=16, ridge=1.0, cov_momentum=0.9)
    phi = torch.randn(10, 16)
    model.update_precision(phi)
    torch.testing.assert_close(model.precision, 0.9 * torch.eye(16) + 0.1 * phi.t() @ phi / 10)
