"""The shared evaluation routine: clean, noisy and OOD loops on a model with known outputs."""

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from datamodules import TensorDataModule
from mnp.eval import metrics
from mnp.eval.eval_protocol import EvalProtocol
from mnp.framework.routine import Routine


class ThresholdModel(Routine):
    """Predicts class 1 iff view 0's first feature > 0; uncertainty = -|feature| (small margin = uncertain)."""

    def __init__(self, num_classes=2, view_dims=(1, 1)):
        super().__init__(num_classes, view_dims)
        self.w = torch.nn.Parameter(torch.zeros(1))

    def training_loss(self, views, y):
        return (self.w**2).sum(), {}

    def predict(self, views):
        x = views[0][:, 0] + 0 * self.w
        p1 = torch.sigmoid(10 * x)
        probs = torch.stack([1 - p1, p1], -1)[None]
        return probs, -x.abs()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def make_dm(n=400, ood_classes=None, eval_bs=37):
    rng = np.random.default_rng(0)
    x0 = rng.normal(0, 1, (n, 1))
    y = (x0[:, 0] > 0).astype(int)
    if ood_classes is not None:  # a third class far from the threshold region
        y = np.where(np.arange(n) % 4 == 0, 2, y)
        x0 = np.where(y[:, None] == 2, rng.normal(0, 0.05, (n, 1)), x0)
    idx = np.arange(n)
    return TensorDataModule(
        [x0, rng.normal(0, 1, (n, 1))],
        y,
        idx[: n // 2],
        idx[n // 2 :],
        eval_batch_size=eval_bs,
        ood_classes=ood_classes,
    )


def run_test(model, dm):
    trainer = pl.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(model, dm)
    trainer.test(model, dm, verbose=False)
    return model.test_results, model.test_arrays


def test_clean_metrics_match_direct_computation():
    dm = make_dm()
    model = ThresholdModel()
    res, arr = run_test(model, dm)
    dm.setup()
    with torch.no_grad():
        probs, unc = model.predict(list(dm.test_views))
    assert res["test/acc"] == pytest.approx(metrics.accuracy(probs[0], dm.test_y))
    assert res["test/ece"] == pytest.approx(metrics.ece(probs[0], dm.test_y), abs=1e-6)
    assert np.allclose(arr["test/probs"], probs[0].numpy(), atol=1e-6)
    assert res["time/train_epoch_s"] > 0 and res["time/test_s"] > 0


def test_noise_protocol_pools_subsets_and_degrades():
    dm = make_dm()
    model = ThresholdModel()
    model.configure_evaluation(EvalProtocol(noise_levels=(0.0, 100.0)))
    res, _ = run_test(model, dm)
    # M=2 -> subsets (0,) and (1,). σ=0: clean accuracy (=1). σ=100: noise on view 0 flips ~half the
    # predictions while noise on view 1 is ignored, so the pooled accuracy is ~ (0.5 + 1) / 2.
    assert res["noise/acc@0"] == pytest.approx(res["test/acc"])
    assert res["noise/acc@100"] == pytest.approx(0.75, abs=0.06)
    assert res["noise/acc_mean"] == pytest.approx((res["noise/acc@0"] + res["noise/acc@100"]) / 2)


def test_noisy_results_reproducible():
    a, _ = run_test(ThresholdModel(), make_dm())
    b, _ = run_test(ThresholdModel(), make_dm())
    assert a["noise/acc_mean"] == b["noise/acc_mean"]


def test_heldout_ood_auroc_over_all_batches():
    dm = make_dm(ood_classes=[2], eval_bs=13)  # many small batches
    model = ThresholdModel()
    res, arr = run_test(model, dm)
    s, y = torch.tensor(arr["ood/heldout/uncertainty"]), torch.tensor(arr["ood/heldout/is_ood"])
    assert res["ood/heldout/auroc"] == pytest.approx(metrics.auroc(s, y))
    assert res["ood/heldout/auroc"] > 0.9  # held-out points sit on the decision boundary


def test_view_dims_mismatch_is_one_clear_error():
    model = ThresholdModel(view_dims=(1, 1))
    with pytest.raises(ValueError, match=r"view dims \[1, 3\] .* built for \[1, 1\]"):
        model.predict_tensors([np.zeros((4, 1)), np.zeros((4, 3))])


def test_bad_construction():
    with pytest.raises(ValueError, match="at least one feature column"):
        ThresholdModel(view_dims=(1, 0))


def test_predict_proba_says_what_is_wrong_with_its_arguments(one_thread):
    """The Python API's errors are ValueErrors naming the problem, raised before any model code runs (they used to
    be a size mismatch deep in the model, ``torch.cat(): expected a non-empty list``, ``range() arg 3 must not be
    zero`` or an IndexError)."""
    from mnp_utils import flat_mnp

    rng = np.random.default_rng(0)
    model = flat_mnp(3, [5, 3], d_e=8, memory_size=6)
    model.init_memory([torch.randn(12, 5), torch.randn(12, 3)], torch.arange(12) % 3)
    x0, x1 = rng.normal(size=(60, 5)), rng.normal(size=(60, 3))
    cases = [
        (([x0, x1[:30]], {}), r"^views\[1\] has 30 rows but views\[0\] has 60$"),
        (([x0[:0], x1[:0]], {}), r"^the views have 0 rows: there is nothing to predict$"),
        (([x0, x1], {"batch_size": 0}), r"^batch_size must be an integer >= 1 \(rows per predict call\), got 0$"),
        (([x0, x1], {"batch_size": 2.5}), r"^batch_size must be an integer >= 1 \(rows per predict call\), got 2\.5$"),
        (([x0[:, 0], x1], {}), r"^views\[0\] has shape \(60,\); expected rows × columns \(2-D, 5 columns\)$"),
    ]
    for (views, kwargs), expected in cases:
        with pytest.raises(ValueError, match=expected):
            model.predict_tensors(views, **kwargs)
    one_nan = x0.copy()
    one_nan[7, 2] = np.nan  # one NaN cell: neither a missing view nor sparsemax's "index -1 is out of bounds"
    with pytest.raises(ValueError, match=r"^views\[0\] row 7 has 1 NaN among its 5 values: a missing view is a row"):
        model.predict_tensors([one_nan, x1])
    probs, unc = model.predict_tensors([x0, x1], batch_size=np.int64(7))  # and valid arguments predict
    assert probs.shape == (60, 3) and unc.shape == (60,) and torch.isfinite(probs).all()
