"""Reliability round four (issue 30): no NaN probability reported as a number."""

import logging
import math

import pytest
import torch
from cfg_utils import compose_train
from test_checkpointing import eval_cfg

from mnp.cli.pipeline import evaluate, train
from mnp.eval import metrics
from mnp.model.view_weighting import view_weights

pytestmark = pytest.mark.usefixtures("one_thread")

TWO_VIEW_MLP = [
    "model=mlp",
    "dataset.num_views=2",
    "dataset.n_train=200",
    "dataset.n_test=100",
    "trainer.max_epochs=1",
    "skip_if_done=false",
    "eval.noise_levels=[0.5,30]",
    "eval.noise_subset_size=2",
]


def test_distance_weights_stay_finite_for_any_power_when_every_view_is_far():
    d2 = torch.tensor([[1e4, 3e4], [2e4, 1e3]])  # (M, B): both views far from the context (noised)
    ref = torch.tensor([1.0, 2.0])
    for power in (1.0, 20.0, 60.0, 1e4):
        w = view_weights(d2, ref, power)
        assert torch.isfinite(w).all() and torch.equal(w.max(-1).values, torch.ones(2)), power
    w = view_weights(d2, ref, 60.0)  # relative proximity, in closed form: ((ref_m / d2_m) / best)^p
    expected = 60 * (torch.log(ref[:, None] / d2) - torch.log(ref[:, None] / d2).max(0).values)
    assert torch.allclose(w, expected.t().exp())


def test_a_row_that_is_not_finite_counts_as_an_error_in_the_accuracy():
    probs = torch.tensor([[0.9, 0.1], [float("nan")] * 2, [0.2, 0.8], [float("inf"), 0.0]])
    labels = torch.tensor([0, 0, 1, 0])  # argmax of the NaN and inf rows would be class 0: right
    assert metrics.accuracy(probs, labels) == 0.5 and metrics.nonfinite_rows(probs) == 2


def test_distance_weighting_with_a_large_power_and_every_view_noised_gives_finite_noise_metrics(tmp_path):
    res = train(
        compose_train(
            tmp_path / "run",
            [
                "model=mnp",
                "dataset.num_views=2",
                "dataset.n_train=200",
                "dataset.n_test=60",
                "model.encoder.d_e=16",
                "model.encoder.resmlp_depth=1",
                "model.memory.size=20",
                "model.warmup.epochs=1",
                "trainer.max_epochs=3",
                "model.decoder.num_samples=3",
                "model.aggregation.view_weighting.mode=distance",
                "model.aggregation.view_weighting.power=60",
                "skip_if_done=false",
                "eval.noise_levels=[30]",
                "eval.noise_subset_size=2",
                "eval.missing=false",
            ],
        )
    )
    assert not [k for k in res if "nonfinite" in k], res
    assert math.isfinite(res["noise/ece@30"]) and math.isfinite(res["noise/acc@30"])


def test_a_checkpoint_with_nan_weights_scores_every_pass_as_errors_and_counts_the_rows(tmp_path, caplog):
    train(compose_train(tmp_path / "run", TWO_VIEW_MLP))
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    key = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point() and v.dim() == 2)
    ckpt["state_dict"][key] = torch.full_like(ckpt["state_dict"][key], float("nan"))
    torch.save(ckpt, tmp_path / "nan.ckpt")
    res = evaluate(eval_cfg(tmp_path / "nan.ckpt", tmp_path / "eval"))
    assert res["test/acc"] == 0.0 and res["test/nonfinite_rows"] == 100
    for sigma in ("0.5", "30"):  # the noised passes: 1 subset (both views) × 100 rows
        assert res[f"noise/acc@{sigma}"] == 0.0 and res[f"noise/nonfinite_rows@{sigma}"] == 100
    for k in (0, 1):  # the missing-view passes
        assert res[f"missing/acc@v{k}"] == 0.0 and res[f"missing/nonfinite_rows@v{k}"] == 100
    assert (
        "100 of 100 noised test rows at sigma 30 have non-finite probabilities (MLP): they count as errors"
        in caplog.text
    )


@pytest.mark.parametrize("cell", [float("inf"), float("-inf")])
@pytest.mark.parametrize("model", ["mnp", "mlp"])
def test_predict_proba_with_an_infinite_cell_is_one_line(tmp_path, model, cell):
    """A18, N30, N31: MNP failed in sparsemax (`index -1 is out of bounds`), the other models returned a NaN row."""
    overrides = [
        f"model={model}",
        "dataset.num_views=2",
        "dataset.n_train=100",
        "dataset.n_test=20",
        "trainer.max_epochs=1",
        "model.warmup.epochs=0" if model == "mnp" else "eval.noise=false",
        "eval.missing=false",
        "test=false",
    ]
    train(compose_train(tmp_path / "run", overrides))
    from mnp.cli.run_loading import load_run

    _, _, _, dm, net, _ = load_run(tmp_path / "run" / "checkpoints" / "last.ckpt")
    dm.setup("test")
    x0, x1 = (v.clone() for v in dm.test_views)
    x1[3, 0] = cell
    with pytest.raises(ValueError) as e:
        net.predict_tensors([x0, x1])
    assert str(e.value) == (
        f"views[1] row 3 holds {cell} in column 0: a model cannot predict from an infinite value; "
        "clip it, or give the row as NaN (a missing view)"
    )


def test_an_early_fusion_run_on_complete_data_does_not_warn_about_imputing(tmp_path, caplog):
    """N38: the missing-view protocol's own removals made every MLP run warn that missing views are imputed."""
    with caplog.at_level(logging.WARNING):
        res = train(compose_train(tmp_path / "run", TWO_VIEW_MLP))
    assert "missing/acc@v1" in res and "imputed with their training means" not in caplog.text
