"""mnp.tools.diagnose: attention and MBA diagnostics of a trained MNP under the noise protocol."""

import json

import pytest
import torch
from cfg_utils import compose_train

from mnp.cli.pipeline import train
from mnp.tools.diagnose.diagnose import diagnose, main

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("diag")
    train(
        compose_train(
            out,
            [
                "model=mnp",
                "dataset.num_views=2",
                "dataset.n_train=300",
                "dataset.n_test=120",
                "model.encoder.d_e=32",
                "model.warmup.epochs=0",
                "trainer.max_epochs=8",
                "eval.noise=false",
            ],
        )
    )
    return out


def test_cli_writes_table_json_and_plot(run_dir, tmp_path, capsys):
    res = main(
        [str(run_dir), "--sigmas", "0", "1e4", "--json", str(tmp_path / "d.json"), "--plot", str(tmp_path / "d.png")]
    )
    assert "MBA precision of noised views" in capsys.readouterr().out
    assert json.loads((tmp_path / "d.json").read_text())["pooled"] == res["pooled"]
    assert (tmp_path / "d.png").stat().st_size > 10_000
    clean, far = res["pooled"]
    assert clean["acc"] > 0.8  # two moons, chance 0.5
    # σ = 1e4 puts the noised view far from every context point: all RBF scores underflow to 0, and
    # sparsemax of a constant vector is uniform, so every context point is attended (the paper's picture)
    # and the oracle "uniform attention" changes nothing (paired Monte Carlo draws)
    n = res["memory_size"]
    assert far["score_max_noised"] < 1e-30 and far["support_noised"] == n
    assert far["acc_uniform"] == far["acc"]
    assert clean["support_clean"] <= n
    assert clean["precision_ratio_noised"] == pytest.approx(1.0)  # σ = 0: the noised views' inputs are clean


def test_mba_shares_of_complementary_subsets_sum_to_one(run_dir):
    from mnp.cli.run_loading import load_run

    _, _, _, dm, model, _ = load_run(run_dir / "checkpoints" / "last.ckpt")
    dm.setup("test")
    views = [v.float() for v in dm.test_views]
    res = diagnose(model, views, dm.test_y, sigmas=[0.0])
    # M = 2: the subsets are (0,) and (1,); at σ = 0 they see the same inputs, so their per-target precision
    # shares p0/(p0+p1) and p1/(p0+p1) sum to 1 and so do their means
    a, b = res["rows"]
    assert a["subset"] == [0] and b["subset"] == [1]
    assert a["mba_weight"] + b["mba_weight"] == pytest.approx(1.0, abs=1e-6)
    assert a["acc"] == b["acc"]  # same clean inputs, same paired draws


def test_rejects_a_model_that_is_not_mnp():
    from baselines.mlp import MLP

    with pytest.raises(TypeError, match="MNP"):
        diagnose(MLP(num_classes=2, view_dims=[2, 2]), [torch.zeros(3, 2)] * 2, torch.zeros(3, dtype=torch.long))


def test_the_cli_on_a_run_of_another_model_or_a_refused_checkpoint_is_one_line(tmp_path, capsys):
    """N103, N21: an 11-line TypeError and an 18-line UnsafeConfig traceback."""
    from mnp.tools.diagnose.diagnose import cli

    run = tmp_path / "mlp"
    train(compose_train(run, ["model=mlp", "dataset.num_views=2", "trainer.max_epochs=1", "test=false"]))
    assert cli([str(run)]) == 1
    assert capsys.readouterr().err == (
        f"error: {run / 'checkpoints' / 'last.ckpt'} is a run of mlp; "
        "mnp.tools.diagnose explains MNP's attention and MBA\n"
    )
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt["mnp_cfg"]["dataset"] = {"_target_": "builtins.open", "_args_": [str(tmp_path / "victim.txt"), "w"]}
    torch.save(ckpt, tmp_path / "open.ckpt")
    assert cli([str(tmp_path / "open.ckpt")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: checkpoint {tmp_path / 'open.ckpt'} refused: ") and err.count("\n") == 1
    assert not (tmp_path / "victim.txt").exists()
