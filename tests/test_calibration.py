"""Temperature scaling (docs/method.md §5.6, ``eval.calibration=temperature``): T fitted on the validation rows
by NLL, applied to the test loop's clean, noisy and missing-view predictions, reported beside the raw metrics."""

import json

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from cfg_utils import compose_train, evaluate_config
from torch import Tensor

from datamodules import TensorDataModule
from mnp.cli.pipeline import train
from mnp.cli.validate import ConfigError, check_eval, validate
from mnp.eval import metrics
from mnp.eval.calibration import fit_temperature, temper, tempered_nll
from mnp.eval.eval_protocol import EvalProtocol
from mnp.framework.routine import Routine
from mnp.tools.report.report_runs import model_label

pytestmark = pytest.mark.usefixtures("one_thread")


def quiet_trainer() -> pl.Trainer:
    return pl.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )


def calibrated_draws(n: int, k: int = 4, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Logits (n, k) and labels drawn from their softmax: softmax(logits) is calibrated by construction."""
    g = torch.Generator().manual_seed(seed)
    logits = 1.5 * torch.randn(n, k, generator=g, dtype=torch.float64)
    return logits, torch.multinomial(logits.softmax(-1), 1, generator=g).squeeze(-1)


# ---------------------------------------------------------------------------- the fit
def test_the_fitted_temperature_is_the_grid_minimum_of_the_nll():
    logits, y = calibrated_draws(400)
    probs = (2.0 * logits).softmax(-1).float()
    t = fit_temperature(probs, y)
    grid = np.exp(np.linspace(np.log(0.2), np.log(5.0), 4001))  # steps of 0.08 % in T
    log_p = probs.double().clamp_min(metrics.EPS).log()
    nll = [tempered_nll(log_p, y, g) for g in grid]
    assert t == pytest.approx(grid[int(np.argmin(nll))], rel=2e-3)
    assert tempered_nll(log_p, y, t) <= min(nll) + 1e-9


def test_temperature_one_leaves_the_probabilities_unchanged():
    probs = calibrated_draws(50)[0].softmax(-1).float()
    torch.testing.assert_close(temper(probs, 1.0), probs)
    assert (temper(probs, 3.0).argmax(-1) == probs.argmax(-1)).all()  # T > 0 keeps the arg-max: accuracy too


def test_an_overconfident_model_gets_t_above_one_and_a_lower_held_out_ece():
    logits, y = calibrated_draws(4000)
    sharp = (3.0 * logits).softmax(-1).float()  # over-confident by hand: the logits tripled
    t = fit_temperature(sharp[:2000], y[:2000])  # fitted on one half
    assert 2.5 < t < 3.5  # the sharpening undone
    raw, cal = metrics.ece(sharp[2000:], y[2000:]), metrics.ece(temper(sharp[2000:], t), y[2000:])
    assert cal < raw / 3, (raw, cal)  # scored on the other half


def test_rows_that_are_not_finite_are_left_out_of_the_fit():
    logits, y = calibrated_draws(200)
    probs = (2.0 * logits).softmax(-1).float()
    bad = probs.clone()
    bad[:5] = float("nan")
    assert fit_temperature(bad, y) == pytest.approx(fit_temperature(probs[5:], y[5:]))


# ---------------------------------------------------------------------------- the test loop
class Overconfident(Routine):
    """The calibrated softmax of view 0 (logits), sharpened ``sharpen`` times; view 1 is ignored. A missing view
    0 gives the uniform prediction."""

    def __init__(self, sharpen: float = 3.0):
        super().__init__(4, [4, 2])
        self.sharpen = sharpen
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def predict(self, views, present=None):
        logits = self.sharpen * views[0]
        if present is not None:
            logits = logits * present[:, :1]
        probs = logits.softmax(-1)[None]
        return probs, metrics.entropy(probs[0])


def logit_module(scramble_test: bool = False, val_fraction: float = 0.25) -> TensorDataModule:
    logits, y = calibrated_draws(3000, seed=1)
    y = y.numpy().copy()
    test_idx = np.arange(2000, 3000)
    if scramble_test:
        y[test_idx] = np.random.default_rng(0).permutation(y[test_idx])
    views = [logits.float().numpy(), np.random.default_rng(1).normal(size=(3000, 2))]
    return TensorDataModule(views, y, np.arange(2000), test_idx, val_fraction=val_fraction, eval_batch_size=500)


def run_test(model: Routine, dm: TensorDataModule, **evaluation) -> dict:
    model.configure_evaluation(EvalProtocol(noise_levels=(0.1, 1.0), **evaluation))
    quiet_trainer().test(model, dm, verbose=False)
    return {k: v for k, v in model.test_results.items() if not k.startswith("time/")}


def test_the_test_loop_reports_raw_and_calibrated_metrics_side_by_side():
    model = Overconfident()
    on = run_test(model, logit_module(), calibration="temperature")
    off = run_test(model, logit_module())
    assert {k: v for k, v in on.items() if not k.startswith(("cal/", "calibration/"))} == off  # raw keys unchanged
    assert 2.5 < on["calibration/temperature"] < 3.5
    assert on["cal/test/ece"] < on["test/ece"] / 2 and on["cal/test/nll"] < on["test/nll"]
    assert on["cal/test/brier"] < on["test/brier"] and "cal/test/acc" not in on  # T keeps the arg-max
    assert on["cal/noise/ece_mean"] < on["noise/ece_mean"]
    assert on["cal/noise/ece_mean"] == pytest.approx((on["cal/noise/ece@0.1"] + on["cal/noise/ece@1"]) / 2)
    assert {"cal/missing/ece@v0", "cal/missing/ece@v1", "cal/missing/ece_mean"} <= set(on)
    assert on["cal/missing/ece@v1"] < on["missing/ece@v1"]  # view 1 removed: the same over-confident view 0
    assert not [k for k in on if k.startswith("view/")]  # no per-view prediction in this model


def test_the_temperature_is_fitted_on_the_validation_rows_only():
    model = Overconfident()
    clean = run_test(model, logit_module(), calibration="temperature")
    scrambled = run_test(model, logit_module(scramble_test=True), calibration="temperature")
    assert scrambled["test/acc"] < clean["test/acc"] - 0.2  # the test labels did change
    assert scrambled["calibration/temperature"] == clean["calibration/temperature"]  # T did not


def test_under_the_selection_protocol_the_calibrated_keys_are_validation_keys():
    dm = logit_module()
    dm.eval_split = "val"
    res = run_test(Overconfident(), dm, calibration="temperature", split="val")
    assert {
        "val/cal/ece",
        "val/cal/nll",
        "val/cal/noise/ece_mean",
        "val/cal/missing/ece_mean",
        "val/calibration/temperature",
    } <= set(res)
    assert not [k for k in res if not k.startswith("val/")]  # what mnp.tools.select reads


def test_without_validation_rows_the_test_says_so():
    with pytest.raises(ValueError, match="eval.calibration=temperature fits T on the validation rows"):
        run_test(Overconfident(), logit_module(val_fraction=0.0), calibration="temperature")


def test_the_config_needs_validation_rows_and_a_known_method(tmp_path):
    with pytest.raises(ConfigError, match="eval.calibration=temperature .* dataset.val_fraction > 0"):
        validate(compose_train(tmp_path, ["model=mlp", "eval.calibration=temperature"]))
    with pytest.raises(ConfigError, match="eval.calibration must be one of none, temperature"):
        check_eval({"calibration": "platt"})
    validate(compose_train(tmp_path, ["model=mlp", "eval.calibration=temperature", "dataset.val_fraction=0.2"]))


def test_train_writes_the_calibrated_and_per_view_metrics(tmp_path):
    """A tiny MNP run through train.py: metrics.json holds cal/, calibration/ and view/ keys."""
    res = train(
        compose_train(
            tmp_path,
            [
                "model=mnp",
                "trainer.max_epochs=2",
                "dataset.num_views=2",
                "dataset.n_train=200",
                "dataset.n_test=100",
                "dataset.val_fraction=0.2",
                "model.encoder.d_e=16",
                "model.memory.size=20",
                "model.warmup.epochs=0",
                "eval.noise_levels=[1.0]",
                "eval.calibration=temperature",
            ],
        )
    )
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk["calibration/temperature"] == res["calibration/temperature"] > 0
    assert {
        "cal/test/ece",
        "cal/test/nll",
        "cal/noise/ece_mean",
        "cal/missing/ece_mean",
        "test/ece",
        "view/acc@v0",
        "view/acc@v1@1",
        "view/acc@1",
    } <= set(on_disk)


def test_the_report_shows_raw_and_temperature_scaled_columns_side_by_side(tmp_path):
    from mnp.tools.report.report import report

    for model, ece, cal in (("mnp", 0.06, 0.03), ("sngp", 0.04, 0.035)):
        for seed in range(2):
            d = tmp_path / "runs" / f"{model}_s{seed}"
            d.mkdir(parents=True)
            (d / "metrics.json").write_text(
                json.dumps(
                    {
                        "model": model,
                        "dataset": "cub",
                        "seed": seed,
                        "epochs": 3,
                        "experiment": "paper_main",
                        "test/acc": 0.8,
                        "test/ece": ece + 0.001 * seed,
                        "test/nll": 0.5,
                        "cal/test/ece": cal + 0.001 * seed,
                        "cal/test/nll": 0.45,
                        "calibration/temperature": 1.5,
                    }
                )
            )
    res = report([tmp_path / "runs"], tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| Method | CUB | CUB T-scaled |" in md and "**Table 3.** Test NLL ↓; T-scaled" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| {model_label('mnp')} |") and "0.060" in line)
    assert "0.060" in row and "**0.030" in row  # raw, then calibrated (the best of its column)
    assert {(c["metric"], c["baseline"]) for c in res["claims"]} >= {("cal/test/ece", "sngp"), ("test/ece", "sngp")}


def test_evaluate_fits_the_same_temperature_from_the_checkpoint(tmp_path):
    """evaluate.py +eval.calibration=temperature on a run trained with validation rows: the T of train.py."""
    from mnp.cli.pipeline import evaluate

    common = [
        "model=mlp",
        "trainer.max_epochs=2",
        "dataset.num_views=2",
        "dataset.n_train=200",
        "dataset.n_test=100",
        "dataset.val_fraction=0.2",
        "eval.noise_levels=[1.0]",
    ]
    res = train(compose_train(tmp_path / "cal", [*common, "eval.calibration=temperature"]))
    plain = train(compose_train(tmp_path / "raw", common))
    assert not [k for k in plain if k.startswith(("cal/", "calibration/"))]
    ev = evaluate(
        evaluate_config(tmp_path / "raw" / "checkpoints" / "last.ckpt", tmp_path / "e", {"calibration": "temperature"})
    )
    assert ev["calibration/temperature"] == pytest.approx(res["calibration/temperature"], rel=1e-6)
    assert ev["cal/test/ece"] == pytest.approx(res["cal/test/ece"], abs=1e-6) and ev["test/ece"] == plain["test/ece"]
