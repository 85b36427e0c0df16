"""The post-hoc layer as objects (docs/method.md §5.6): calibrators with ``fit(probs, labels)`` and
``calibrator(probs)``, each against a closed form or a reference fit, and the stage that reads the validation
rows through a declared interface."""

import numpy as np
import pytest
import torch

from mnp.core import metrics
from mnp.core.calibration import TemperatureScaling, temper, tempered_nll
from mnp.core.eval_protocol import EvalProtocol
from mnp.core.posthoc import PostHoc, validation_predictions
from test_calibration import Overconfident, calibrated_draws

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
