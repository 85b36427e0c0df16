"""Missing views (docs/method.md §5): every model predicts from the views present, early fusion imputes
the training means, the errors are one line, and the missing-view protocol of the test loop."""

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from cfg_utils import CONF, compose_train
from omegaconf import open_dict

from datamodules import TensorDataModule
from mnp.cli.builders import build_model
from mnp.cli.pipeline import train
from mnp.cli.run_loading import load_run
from mnp.cli.validate import ConfigError, validate
from mnp.eval import metrics
from mnp.eval.eval_protocol import EvalProtocol
from mnp.runs.checkpointing import check_fits

pytestmark = pytest.mark.usefixtures("one_thread")  # small models: one thread is fastest on 2 shared cores

MODELS = sorted(p.stem for p in Path(CONF, "model").glob("*.yaml"))
EARLY_FUSION = ["de_ef", "etp", "mcd", "mlp", "sngp"]
# sizes that keep every model tiny; a key applies where the model's config has it
SMALL = {
    "hidden": [16],
    "members": 2,
    "d_e": 16,
    "memory_size": 12,
    "warmup_epochs": 0,
    "num_inducing": 8,
    "mc_samples": 4,
    "num_features": 32,
    "samples": 3,
    "num_samples": 2,
}


def quiet_trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        **kwargs,
    )


def fitted(name: str, dm, tmp_path, epochs: int = 2, **model_keys):
    """Model ``name`` as train.py builds it (conf/model/<name>.yaml, shrunk), fitted on ``dm``."""
    cfg = compose_train(tmp_path, [f"model={name}"])
    with open_dict(cfg):
        for key, value in {**SMALL, **model_keys}.items():
            if key in cfg.model:
                cfg.model[key] = value
    pl.seed_everything(0, verbose=False)
    dm.setup()
    model = build_model(cfg, dm)[1]
    quiet_trainer(max_epochs=epochs).fit(model, dm)
    return model


def tiny_dm(tiny_views, **kwargs):
    views, y = tiny_views
    return TensorDataModule(views, y, np.arange(0, 36, 2), np.arange(1, 36, 2), batch_size=12, **kwargs)


# ---------------------------------------------------------------------------- every model, predict_proba
@pytest.mark.parametrize("name", MODELS)
def test_every_model_predicts_from_the_views_present(name, tiny_views, tmp_path):
    dm = tiny_dm(tiny_views, scaling="minmax")
    model = fitted(name, dm, tmp_path)
    x0, x1 = (v.numpy() for v in dm.test_views)
    rows = x1.copy()
    rows[[0, 4]] = np.nan  # view 1 missing in two rows only
    both = x0.copy()
    both[1] = np.nan  # and view 0 in another
    for views in ([x0, None], [None, x1], [x0, rows], [both, rows]):
        probs, unc = model.predict_tensors(views)
        assert probs.shape == (18, 3) and unc.shape == (18,)
        assert torch.isfinite(probs).all() and torch.isfinite(unc).all(), name
        assert torch.allclose(probs.sum(1), torch.ones(18), atol=1e-5)
    lost0, lost1 = x0.copy(), x1.copy()
    lost0[3], lost1[3] = np.nan, np.nan
    with pytest.raises(ValueError, match=r"^row 3 has no view: every view is None or NaN there"):
        model.predict_tensors([lost0, lost1])
    partial = x1.copy()
    partial[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"^views\[1\] row 2 has 1 NaN among its 3 values"):
        model.predict_tensors([x0, partial])
    with pytest.raises(ValueError, match=r"^every view is None"):
        model.predict_tensors([None, None])


@pytest.mark.parametrize("name", EARLY_FUSION)
def test_early_fusion_imputes_the_training_means(name, tiny_views, tmp_path, caplog):
    dm = tiny_dm(tiny_views, scaling="minmax")
    model = fitted(name, dm, tmp_path)
    expected = np.concatenate([v.numpy() for v in dm.train_views], axis=1).mean(0)
    assert "view_means" in model.state_dict()  # so checkpoints carry it
    np.testing.assert_allclose(model.view_means.numpy(), expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(expected, np.concatenate([v.mean(0) for v in tiny_views[0]]))  # the scaled data's means
    x0, x1 = dm.test_views
    present = torch.tensor([[True, False]] * len(x0))
    model.eval()
    with torch.no_grad(), caplog.at_level(logging.WARNING):
        outs = []
        for views, mask in (([x0, torch.zeros_like(x1)], present), ([x0, model.view_means[5:].expand_as(x1)], None)):
            model.sample_generator = torch.Generator().manual_seed(0)  # the same MC draws for both
            outs.append(model.predict(views, mask)[0])
        model.predict([x0, x1], present)
    torch.testing.assert_close(outs[0], outs[1])
    said = [r for r in caplog.records if "imputed with their training means" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0].getMessage()


def test_early_fusion_without_recorded_means_is_one_clear_error():
    from baselines.mlp import MLP

    with pytest.raises(
        ValueError,
        match=r"^MLP imputes a missing view with its training means, which it has not "
        r"recorded: .*model.set_training_means",
    ):
        MLP(3, [5, 3], hidden=(8,)).predict_tensors([np.zeros((4, 5)), None])


def test_a_checkpoint_from_before_the_means_loads_and_testing_fills_them(tiny_views, tmp_path):
    """A checkpoint without ``view_means`` (written before it existed) resumes (check_fits) and loads;
    testing it with its datamodule records the means."""
    from baselines.mlp import MLP

    dm = tiny_dm(tiny_views)
    model = MLP(3, [5, 3], hidden=(8,))
    trainer = pl.Trainer(
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        default_root_dir=str(tmp_path),
    )
    trainer.fit(model, dm)
    path = tmp_path / "old.ckpt"
    trainer.save_checkpoint(path)
    ckpt = torch.load(path, weights_only=False)
    del ckpt["state_dict"]["view_means"]
    torch.save(ckpt, path)
    check_fits(str(path), MLP(3, [5, 3], hidden=(8,)))
    old = MLP.load_from_checkpoint(str(path), weights_only=True)
    assert torch.isnan(old.view_means).all()
    old.configure_evaluation(EvalProtocol(noise=False))
    quiet_trainer().test(old, dm, verbose=False)
    torch.testing.assert_close(old.view_means, model.view_means)
    assert "missing/acc@v0" in old.test_results


# ---------------------------------------------------------------------------- fusion over the views present
def test_mgp_product_of_experts_runs_over_the_views_present():
    from baselines.mgp import WEIGHTINGS, fuse_experts

    g = torch.Generator().manual_seed(0)
    means, variances = torch.randn(3, 4, 2, generator=g), torch.rand(3, 4, 2, generator=g) + 0.05
    present = torch.tensor([[True, True, True], [True, False, True], [False, True, False], [False, True, True]])
    for weighting in WEIGHTINGS:
        mu, var = fuse_experts(means, variances, weighting, present)
        for b, row in enumerate(present):
            m, v = fuse_experts(means[row, b : b + 1], variances[row, b : b + 1], weighting)
            torch.testing.assert_close((mu[b], var[b]), (m[0], v[0]))
        every = fuse_experts(means, variances, weighting, torch.ones(4, 3, dtype=torch.bool))
        torch.testing.assert_close(every, fuse_experts(means, variances, weighting))


def test_tmc_fuses_the_opinions_of_the_views_present():
    from baselines.tmc import TMC, dempster_combine_all

    torch.manual_seed(0)
    model = TMC(3, [4, 2, 3]).eval()
    views = [torch.randn(5, d) for d in (4, 2, 3)]
    present = torch.tensor(
        [[True, True, True], [True, False, True], [False, True, False], [False, False, True], [True, True, False]]
    )
    with torch.no_grad():
        probs, unc = model.predict(views, present)
        alphas = model.view_alphas(views)
    for b, row in enumerate(present):
        fused = dempster_combine_all(list(alphas[row, b : b + 1]))[0]
        torch.testing.assert_close(probs[0, b], fused / fused.sum())
        torch.testing.assert_close(unc[b], 3 / fused.sum())


def test_late_fusion_ensemble_averages_the_members_present():
    from baselines.deep_ensemble import DeepEnsemble

    torch.manual_seed(0)
    model = DeepEnsemble(3, [4, 2, 3], fusion="late", hidden=(8,), uncertainty="variance").eval()
    views = [torch.randn(4, d) for d in (4, 2, 3)]
    present = torch.tensor([[True, True, True], [True, False, True], [False, True, False], [False, True, True]])
    with torch.no_grad():
        probs, unc = model.predict(views, present)
        members = model.logits(views).softmax(-1)
    for b, row in enumerate(present):
        kept = members[row, b]
        torch.testing.assert_close(probs[:, b].mean(0), kept.mean(0))
        torch.testing.assert_close(unc[b], kept.var(0, unbiased=False).sum())


def informative_view0(n: int = 240):
    """Two classes; view 0 separates them, view 1 is pure noise."""
    rng = np.random.default_rng(1)
    y = np.tile([0, 1], n // 2)
    views = [rng.normal(size=(n, 4)) + np.where(y[:, None] == 1, 2.0, -2.0), rng.normal(size=(n, 4))]
    return TensorDataModule(views, y, np.arange(n // 2), np.arange(n // 2, n), batch_size=40), y[n // 2 :]


@pytest.mark.parametrize("name", ["mnp", "mgp"])
def test_removing_the_informative_view_drops_to_chance(name, tmp_path):
    dm, y = informative_view0()
    model = fitted(name, dm, tmp_path, epochs=15, d_e=32, memory_size=40, num_inducing=20, mc_samples=20)
    x0, x1 = dm.test_views
    acc = {
        k: (model.predict_tensors(v)[0].argmax(1).numpy() == y).mean()
        for k, v in {"no_v1": [x0, None], "no_v0": [None, x1]}.items()
    }
    assert acc["no_v1"] > 0.95, acc
    assert 0.35 < acc["no_v0"] < 0.65, acc  # chance: 0.5


# ---------------------------------------------------------------------------- the test loop
def test_train_reports_the_missing_view_protocol(tmp_path):
    """A tiny train.py run: missing/ beside noise/, each equal to predict_proba with that view None."""
    res = train(
        compose_train(
            tmp_path,
            ["model=mlp", "trainer.max_epochs=2", "dataset.num_views=2", "dataset.n_train=200", "dataset.n_test=120"],
        )
    )
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    keys = {
        "missing/acc@v0",
        "missing/ece@v0",
        "missing/acc@v1",
        "missing/ece@v1",
        "missing/acc_mean",
        "missing/ece_mean",
        "missing/acc_subsets_mean",
    }
    assert keys <= set(on_disk) and "noise/acc_mean" in on_disk
    _, _, _, dm, model, _ = load_run(tmp_path / "checkpoints" / "last.ckpt")
    for k in (0, 1):
        views = [None if j == k else v for j, v in enumerate(dm.test_views)]
        probs = model.predict_tensors(views)[0]
        assert on_disk[f"missing/acc@v{k}"] == pytest.approx(metrics.accuracy(probs, dm.test_y), abs=1e-6)
        assert on_disk[f"missing/ece@v{k}"] == pytest.approx(metrics.ece(probs, dm.test_y), abs=1e-6)
    assert res["missing/acc_mean"] == pytest.approx((res["missing/acc@v0"] + res["missing/acc@v1"]) / 2)
    assert res["missing/acc_subsets_mean"] == pytest.approx(res["missing/acc_mean"])  # M = 2: subsets (0,), (1,)


def test_the_protocol_is_off_by_key_and_for_a_single_view(tmp_path):
    off = train(
        compose_train(
            tmp_path / "off",
            [
                "model=tmc",
                "trainer.max_epochs=1",
                "dataset.num_views=2",
                "dataset.n_train=100",
                "dataset.n_test=50",
                "eval.missing=false",
            ],
        )
    )
    single = train(
        compose_train(
            tmp_path / "one", ["model=mlp", "trainer.max_epochs=1", "dataset.n_train=100", "dataset.n_test=50"]
        )
    )
    assert "noise/acc_mean" in off and not [k for k in off if k.startswith("missing/")]
    assert not [k for k in single if k.startswith("missing/")]


def three_view_dm():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 150)
    views = [rng.normal(size=(150, d)) + s * y[:, None] for d, s in ((3, 2.0), (4, 0.7), (2, 0.3))]
    return TensorDataModule(views, y, np.arange(100), np.arange(100, 150), eval_batch_size=20)


def test_subsets_removed_are_the_noise_subsets_and_the_noise_metrics_stay_put():
    """MC Dropout samples from the test generators: its clean and noisy numbers are the same with the protocol
    off. 3 views, noise subsets of 2: acc_subsets_mean is the mean accuracy with each pair removed."""
    from baselines.mcd import MCDropout

    dm = three_view_dm()
    torch.manual_seed(0)
    model = MCDropout(3, [3, 4, 2], hidden=(16,), mc_samples=8, optim={"lr": 1e-2})
    quiet_trainer(max_epochs=30).fit(model, dm)
    results = {}
    for missing in (True, False):
        model.configure_evaluation(EvalProtocol(noise_levels=(0.1, 1.0), noise_subset_size=2, missing=missing))
        quiet_trainer().test(model, dm, verbose=False)
        results[missing] = {k: v for k, v in model.test_results.items() if not k.startswith("time/")}
    on, off = results[True], results[False]
    assert {k: v for k, v in on.items() if not k.startswith("missing/")} == off
    assert sorted(k for k in on if k.startswith("missing/acc@")) == [
        "missing/acc@v0",
        "missing/acc@v1",
        "missing/acc@v2",
    ]
    model.mc_samples = 0  # deterministic: the protocol's numbers equal predict_proba's
    model.configure_evaluation(EvalProtocol(noise_levels=(0.1,), noise_subset_size=2))
    quiet_trainer().test(model, dm, verbose=False)
    res = model.test_results
    accs = [
        metrics.accuracy(
            model.predict_tensors([None if j in pair else v for j, v in enumerate(dm.test_views)])[0], dm.test_y
        )
        for pair in ((0, 1), (0, 2), (1, 2))
    ]
    assert res["missing/acc_subsets_mean"] == pytest.approx(np.mean(accs), abs=1e-6)
    assert res["missing/acc@v0"] < res["missing/acc@v2"]  # view 0 carries the most information


def test_the_test_loop_accepts_rows_missing_a_view(tiny_views):
    from baselines.tmc import TMC

    dm = tiny_dm(tiny_views)
    torch.manual_seed(0)
    model = TMC(3, [5, 3])
    quiet_trainer(max_epochs=2).fit(model, dm)
    dm.test_views[1][[0, 5]] = float("nan")  # a datamodule whose test set misses view 1 in two rows
    model.configure_evaluation(EvalProtocol(noise_levels=(0.5,)))
    quiet_trainer().test(model, dm, verbose=False)
    probs = model.predict_tensors(dm.test_views)[0]
    assert model.test_results["test/acc"] == pytest.approx(metrics.accuracy(probs, dm.test_y))
    assert all(np.isfinite(v) for v in model.test_results.values())
    dm.test_views[0][3, 2] = float("nan")
    with pytest.raises(ValueError, match=r"^test set 0, batch 0: views\[0\] row 3 has 1 NaN among its 5 values"):
        quiet_trainer().test(model, dm, verbose=False)


def test_a_model_without_a_present_mask_says_so_and_skips_the_protocol():
    from test_routine import ThresholdModel, make_dm, run_test

    model = ThresholdModel()
    with pytest.raises(ValueError, match=r"^ThresholdModel cannot predict with missing views: its predict takes no "):
        model.predict_tensors([np.zeros((4, 1)), None])
    res, _ = run_test(model, make_dm())
    assert "noise/acc_mean" in res and not [k for k in res if k.startswith("missing/")]


@pytest.mark.parametrize("value", ["1", "maybe", "null"])
def test_validation_rejects_a_bad_missing_flag(tmp_path, value):
    cfg = compose_train(tmp_path, ["model=mlp", f"eval.missing={value}"])
    with pytest.raises(ConfigError, match=rf"^{re.escape('eval.missing must be true or false')}"):
        validate(cfg)
