"""The post-hoc layer as objects (docs/method.md §5.6): calibrators with ``fit(probs, labels)`` and
``calibrator(probs)``, each against a closed form or a reference fit, and the stage that reads the validation
rows through a declared interface."""

import numpy as np
import pytest
import torch
from cfg_utils import compose_train
from test_calibration import Overconfident, calibrated_draws, logit_module, run_test

from mnp.cli.validate import ConfigError, check_eval, validate
from mnp.eval import metrics
from mnp.eval.calibration import (
    ODIR_LAMBDA,
    ODIR_MU,
    DirichletScaling,
    IsotonicCalibration,
    TemperatureScaling,
    VectorScaling,
    temper,
    tempered_nll,
)
from mnp.eval.eval_protocol import EvalProtocol
from mnp.eval.posthoc import PostHoc, validation_predictions

pytestmark = pytest.mark.usefixtures("one_thread")


class Rows:
    """A bare object with the declared validation-row interface (no datamodule, no trainer)."""

    def __init__(self, views, y, eval_batch_size=7):
        self.val_views, self.val_y, self.eval_batch_size = views, y, eval_batch_size


def test_temperature_scaling_is_an_object_fitted_to_the_grid_minimum():
    logits, y = calibrated_draws(400)
    probs = (2.0 * logits).softmax(-1).float()
    cal = TemperatureScaling()
    assert cal.fit(probs, y) is cal
    grid = np.exp(np.linspace(np.log(0.2), np.log(5.0), 20001))  # steps of 0.016 % in T
    log_p = probs.double().clamp_min(metrics.EPS).log()
    best = grid[int(np.argmin([tempered_nll(log_p, y, t) for t in grid]))]
    assert cal.temperature == pytest.approx(best, rel=4e-4) and cal.params() == {"temperature": cal.temperature}
    torch.testing.assert_close(cal(probs), temper(probs, cal.temperature))
    assert cal(probs[None].expand(3, -1, -1)).shape == (3, 400, 4)  # the noise protocol's (subsets, N, K)


def test_the_stage_predicts_the_validation_rows_through_the_declared_interface():
    logits, y = calibrated_draws(20, seed=3)
    model = Overconfident()
    model.configure_evaluation(EvalProtocol(calibration="temperature"))
    rows = Rows([logits.float(), torch.zeros(20, 2)], y)
    probs, labels = validation_predictions(model, rows)  # three batches of 7 rows
    torch.testing.assert_close(probs, (3.0 * logits.float()).softmax(-1))
    assert labels.tolist() == y.tolist() and model.sample_generator is None
    stage = PostHoc(model.protocol, 4, 2)
    assert stage.check(rows) is rows
    with pytest.raises(ValueError, match=r"^eval.calibration=temperature fits T on the validation rows: set dataset"):
        stage.check(Rows([torch.zeros(0, 4), torch.zeros(0, 2)], torch.zeros(0)))
    with pytest.raises(ValueError, match=r"^eval.calibration=temperature fits T .* dataset.val_fraction > 0$"):
        stage.check(object())  # a datamodule without validation rows at all


# ---------------------------------------------------------------------------- more calibrators
def linear_draws(weight, bias, n: int, seed: int = 0):
    """Model probabilities (n, K) at random and labels drawn from softmax(W log p + b): a well-specified problem."""
    g = torch.Generator().manual_seed(seed)
    k = len(bias)
    probs = (1.5 * torch.randn(n, k, generator=g, dtype=torch.float64)).softmax(-1)
    w = torch.as_tensor(weight, dtype=torch.float64)
    z = (probs.log() * w if w.ndim == 1 else probs.log() @ w.T) + torch.as_tensor(bias, dtype=torch.float64)
    return probs.float(), torch.multinomial(z.softmax(-1), 1, generator=g).squeeze(-1)


def test_vector_scaling_recovers_a_known_per_class_temperature():
    scale, bias = [0.5, 1.0, 2.5], [0.3, -0.2, 0.1]  # per-class temperatures 2, 1 and 0.4
    probs, y = linear_draws(scale, bias, 20000)
    cal = VectorScaling().fit(probs, y)
    assert cal.weight.tolist() == pytest.approx(scale, abs=0.08)
    assert (cal.bias - cal.bias.mean()).tolist() == pytest.approx(
        [0.3 - 0.4 / 3, -0.2 - 0.4 / 3, 0.1 - 0.4 / 3], abs=0.08
    )
    raw, fitted = metrics.nll(probs, y), metrics.nll(cal(probs), y)
    assert fitted < raw - 0.05 and cal.keeps_argmax is False


def test_dirichlet_scaling_without_penalty_recovers_a_full_linear_map():
    weight = torch.tensor([[1.5, 0.4, -0.3], [0.2, 0.7, 0.0], [-0.5, 0.3, 1.2]], dtype=torch.float64)
    bias = [0.2, 0.0, -0.3]
    probs, y = linear_draws(weight, bias, 30000, seed=1)
    cal = DirichletScaling(lam=0.0, mu=0.0).fit(probs, y)
    # softmax is unchanged by a row added to every class: compare the maps centred over the classes
    centred = lambda m: m - m.mean(0, keepdim=True)  # noqa: E731
    torch.testing.assert_close(centred(cal.weight), centred(weight), atol=0.1, rtol=0)
    torch.testing.assert_close(centred(cal.bias), centred(torch.tensor(bias, dtype=torch.float64)), atol=0.1, rtol=0)


def test_the_odir_penalty_shrinks_the_off_diagonal_on_few_rows():
    probs, y = linear_draws(torch.eye(4), [0.0] * 4, 40, seed=2)
    free, odir = DirichletScaling(0.0, 0.0).fit(probs, y), DirichletScaling(lam=1.0, mu=1.0).fit(probs, y)
    off = lambda w: (w - torch.diag(torch.diagonal(w))).abs().sum().item()  # noqa: E731
    assert off(odir.weight) < off(free.weight) / 2 and odir.bias.abs().sum() < free.bias.abs().sum()
    assert (DirichletScaling().lam, DirichletScaling().mu) == (ODIR_LAMBDA, ODIR_MU)


class Identity:
    """A prefit scikit-learn classifier whose probabilities are its input."""

    _estimator_type = "classifier"

    def __init__(self, k):
        self.classes_ = np.arange(k)

    def fit(self, x, y):
        return self

    def predict_proba(self, x):
        return np.asarray(x)

    def predict(self, x):
        return np.asarray(x).argmax(1)

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags, Tags, TargetTags

        return Tags(estimator_type="classifier", classifier_tags=ClassifierTags(), target_tags=TargetTags(True))


def test_isotonic_calibration_equals_scikit_learns_calibrated_classifier():
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    probs, y = linear_draws([2.0, 2.0, 2.0, 2.0], [0.0] * 4, 600, seed=3)
    test = linear_draws([2.0] * 4, [0.0] * 4, 300, seed=4)[0]
    ours = IsotonicCalibration().fit(probs, y)
    ref = CalibratedClassifierCV(FrozenEstimator(Identity(4)), method="isotonic").fit(probs.numpy(), y.numpy())
    np.testing.assert_allclose(ours(test).numpy(), ref.predict_proba(test.numpy()), atol=1e-6)
    bad = test.clone()
    bad[0] = float("nan")
    assert torch.isnan(ours(bad)[0]).all() and torch.equal(ours(bad)[1:], ours(test)[1:])  # NaN rows stay NaN


@pytest.mark.parametrize(
    "method, y, why",
    [
        ("vector", [0, 1, 2, 3, 0, 1, 2], "it needs at least 8 rows for 4 classes, there are 7"),
        ("dirichlet", [0, 1, 2, 3, 0, 1, 2], "it needs at least 8 rows for 4 classes, there are 7"),
        ("temperature", [2] * 12, "all 12 rows are of class 2"),
        ("isotonic", [0, 1, 2, 0, 1, 2, 0, 1], "1 classes have none of the 8 rows (class 3 first), one map a class"),
    ],
)
def test_a_calibrator_that_cannot_be_fitted_is_refused_in_one_line(method, y, why):
    stage = PostHoc(EvalProtocol(calibration=method), 4, 2)
    rows = Rows([torch.zeros(len(y), 4), torch.zeros(len(y), 2)], torch.tensor(y))
    msg = f"eval.calibration={method} cannot be fitted on the validation rows: {why}; set a larger dataset.val_fraction"
    with pytest.raises(ValueError) as e:
        stage.check(rows)
    assert str(e.value) == msg


@pytest.mark.parametrize("method", ["vector", "dirichlet", "isotonic"])
def test_the_test_loop_reports_each_calibrators_metrics(method):
    model = Overconfident()
    on = run_test(model, logit_module(), calibration=method)
    off = run_test(model, logit_module())
    assert {k: v for k, v in on.items() if not k.startswith(("cal/", "calibration/"))} == off
    assert on["calibration/method"] == method and "calibration/temperature" not in on
    assert on["cal/test/ece"] < on["test/ece"] / 2 and on["cal/test/nll"] < on["test/nll"]
    assert abs(on["cal/test/acc"] - on["test/acc"]) < 0.03  # a map that may move the arg-max reports accuracy
    assert {"cal/noise/ece_mean", "cal/missing/ece@v1", "cal/test/brier"} <= set(on)


def test_the_config_refuses_a_calibrator_without_validation_rows(tmp_path):
    with pytest.raises(
        ConfigError, match=r"^eval.calibration=dirichlet fits its map on the validation rows: set dataset"
    ):
        validate(compose_train(tmp_path, ["model=mlp", "eval.calibration=dirichlet"]))
    with pytest.raises(
        ConfigError, match="eval.calibration must be one of none, temperature, vector, dirichlet, isotonic"
    ):
        check_eval({"calibration": "platt"})
