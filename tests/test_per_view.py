"""Per-view metrics (docs/method.md §5.5): MNP's per-view prediction is the decoder on that view's unimodal
posterior, and the test loop's ``view/`` metrics read each view's own prediction, clean and noised."""

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from mnp_utils import flat_mnp

from datamodules import TensorDataModule
from mnp.cli.validate import ConfigError, check_eval
from mnp.eval.eval_protocol import EvalProtocol
from mnp.model import MNP

pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread is fastest on 2 shared cores


def quiet_trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        **kwargs,
    )


def informative_view0(n: int = 240) -> TensorDataModule:
    """Two classes; view 0 separates them, view 1 is pure noise."""
    rng = np.random.default_rng(1)
    y = np.tile([0, 1], n // 2)
    views = [rng.normal(size=(n, 4)) + np.where(y[:, None] == 1, 2.0, -2.0), rng.normal(size=(n, 4))]
    return TensorDataModule(views, y, np.arange(n // 2), np.arange(n // 2, n), batch_size=40)


def tiny_mnp(dm: TensorDataModule, epochs: int, **kw) -> MNP:
    pl.seed_everything(0, verbose=False)
    dm.setup()
    model = flat_mnp(dm.num_classes, dm.view_dims, **{"d_e": 32, "memory_size": 40, "num_samples": 3, **kw})
    quiet_trainer(max_epochs=epochs).fit(model, dm)
    return model.eval()


def test_mnp_view_prediction_is_the_views_posterior_decoded_by_hand():
    dm = informative_view0(80)
    model = tiny_mnp(dm, epochs=2, projection="linear")
    views, s = [v[:10] for v in dm.test_views], model.spec.decoder.num_samples
    with torch.no_grad():
        model.sample_generator = torch.Generator().manual_seed(3)
        per = model.view_predictions(views)
        _, _, r, v, u, q = model._attend(views)  # r*, s*, u, q: (M, B, d) and (M, 1, d)
        g = torch.Generator().manual_seed(3)
        eps_z = torch.randn((s, *r.shape), generator=g)  # sample_logits' draws: z for every view, then logits
        eps_y = torch.randn((s, s, *r.shape[:2], dm.num_classes), generator=g)
        for k in range(2):
            var = 1.0 / (1.0 / v[k] + 1.0 / q[k])  # eq. 8 with view k's terms alone
            mu = var * (r[k] / v[k] + u[k] / q[k])
            loc, scale = model.decoder(mu + var.sqrt() * eps_z[:, k])
            by_hand = (loc + scale * eps_y[:, :, k]).reshape(s * s, 10, -1).softmax(-1)
            assert per[k].shape == (s * s, 10, dm.num_classes)
            torch.testing.assert_close(per[k], by_hand)
    model.sample_generator = None


def test_a_pure_noise_view_is_at_chance_alone_while_the_other_stays_high():
    dm = informative_view0()
    model = tiny_mnp(dm, epochs=15)
    results = {}
    for per_view in (True, False):
        model.configure_evaluation(EvalProtocol(noise_levels=(0.1, 100.0), per_view=per_view))
        quiet_trainer().test(model, dm, verbose=False)
        results[per_view] = {k: v for k, v in model.test_results.items() if not k.startswith("time/")}
        arrays = model.test_arrays
    on, off = results[True], results[False]
    assert on["view/acc@v0"] > 0.9 and 0.35 < on["view/acc@v1"] < 0.65, on  # chance: 0.5
    assert on["view/acc@v0@0.1"] > 0.9 and 0.35 < on["view/acc@v0@100"] < 0.65  # view 0 drowned: chance
    assert on["view/acc@100"] == pytest.approx((on["view/acc@v0@100"] + on["view/acc@v1@100"]) / 2)
    assert on["view/noise_acc_mean@v0"] == pytest.approx((on["view/acc@v0@0.1"] + on["view/acc@v0@100"]) / 2)
    assert on["view/acc_mean"] == pytest.approx((on["view/acc@v0"] + on["view/acc@v1"]) / 2)
    assert {"view/ece@v0", "view/ece@v1@100", "view/ece@0.1", "view/noise_ece_mean@v1", "view/ece_mean"} <= set(on)
    # the fused metrics do not move with the per-view ones on (their own sampling generator, the same noise)
    assert {k: v for k, v in on.items() if not k.startswith("view/")} == off
    assert on["missing/acc@v1"] > 0.9 and not [k for k in off if k.startswith("view/")]
    assert "view/noise_acc" not in arrays  # the last test ran with per_view off


def test_the_per_view_arrays_and_a_model_without_the_hook():
    from baselines.mlp import MLP

    dm = informative_view0(80)
    model = tiny_mnp(dm, epochs=1)
    model.configure_evaluation(EvalProtocol(noise_levels=(0.1, 1.0, 10.0)))
    quiet_trainer().test(model, dm, verbose=False)
    acc = model.test_arrays["view/noise_acc"]
    assert acc.shape == (2, 3) and acc[0, 2] == model.test_results["view/acc@v0@10"]
    per_call = model.test_results
    model.configure_evaluation(
        EvalProtocol(noise_levels=(0.1, 1.0, 10.0), noise_batch_rows=50)
    )  # the GPU layout, in chunks
    quiet_trainer().test(model, dm, verbose=False)
    chunked = model.test_results
    assert {k for k in chunked if k.startswith("view/")} == {k for k in per_call if k.startswith("view/")}
    assert chunked["view/acc@v0"] == per_call["view/acc@v0"]  # clean: the same call
    assert chunked["view/acc@v0@0.1"] == pytest.approx(per_call["view/acc@v0@0.1"], abs=0.1)  # the same noise
    mlp = MLP(dm.num_classes, dm.view_dims)
    quiet_trainer().test(mlp, dm, verbose=False)
    assert "test/acc" in mlp.test_results and not [k for k in mlp.test_results if k.startswith("view/")]


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_eval_per_view_is_a_flag(bad):
    with pytest.raises(ConfigError, match="eval.per_view must be true or false"):
        check_eval({"per_view": bad})


def test_a_view_in_no_noise_subset_has_no_noisy_key():
    """eval.noise_max_subsets=1 of the two subsets (0,), (1,): one view is never noised, and gets no view/...@σ."""
    dm = informative_view0(80)
    model = tiny_mnp(dm, epochs=1)
    model.configure_evaluation(EvalProtocol(noise_levels=(1.0,), noise_max_subsets=1, missing=False))
    quiet_trainer().test(model, dm, verbose=False)
    res, (subset,) = model.test_results, model.noise_subsets
    (k,), other = subset, 1 - subset[0]
    assert f"view/acc@v{k}@1" in res and f"view/acc@v{other}@1" not in res and f"view/acc@v{other}" in res
    assert res["view/acc@1"] == res[f"view/acc@v{k}@1"] and np.isnan(model.test_arrays["view/noise_acc"][other]).all()
    assert all(np.isfinite(v) for v in res.values())
