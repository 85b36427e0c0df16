"""docs/extending.md's example model (docs/examples/late_logreg.py) trains through train.py, runs the noise and
missing-view protocols, is rebuilt by evaluate.py and mnp.load once registered, and appears in the report."""

import numpy as np
import pytest
from cfg_utils import ROOT, compose_train
from omegaconf import OmegaConf
from sklearn.datasets import load_digits

import mnp
from mnp.cli.pipeline import evaluate, train
from mnp.runs import stored_config
from mnp.tools.report.report import report

EXAMPLES = ROOT / "docs" / "examples"


@pytest.mark.slow  # trains, tests with both protocols, evaluates: about 40 s on 2 cores
def test_the_guides_example_model_trains_evaluates_and_reports(tmp_path, monkeypatch, one_thread):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # your module: importable where train.py runs
    monkeypatch.setattr(stored_config, "MODELS", stored_config.MODELS | {"late_logreg.LateLogReg"})  # registered
    x, y = load_digits(return_X_y=True)
    np.savez(tmp_path / "digits.npz", x1=x[:, :32], x2=x[:, 32:], y=y)
    run = tmp_path / "logs" / "default" / "runs" / "late_logreg_custom_s0"
    res = train(
        compose_train(
            run,
            [
                "model=late_logreg",
                f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]",
                "dataset=custom",
                f"dataset.path={tmp_path / 'digits.npz'}",
                "trainer.max_epochs=10",
                "eval.noise_levels=[0.1,1.0]",
            ],
        )
    )
    assert res["model"] == "late_logreg" and res["test/acc"] > 0.85
    assert {"noise/acc_mean", "missing/acc@v0", "missing/acc@v1", "test/aurc"} <= set(res)
    assert res["missing/acc@v0"] > 0.5  # view x1 removed: the other view's classifier alone

    ev = evaluate(
        OmegaConf.create(
            {
                "ckpt_path": str(run / "checkpoints" / "last.ckpt"),
                "output_dir": str(tmp_path / "ev"),
                "data_dir": None,
                "eval": None,
                "trainer": {"accelerator": "cpu", "devices": 1},
            }
        )
    )
    assert ev["test/acc"] == pytest.approx(res["test/acc"])
    probs = mnp.load(run).predict_proba([x[:5, :32], None])  # view 2 missing
    assert probs.shape == (5, 10)

    out = report([tmp_path / "logs"], tmp_path / "report", plots=False)
    assert [
        k for k in out["aggregate"] if "late_logreg" in k and "digits" in k and "test/acc" in k
    ]  # named by its file
    assert "late_logreg" in (tmp_path / "report" / "results.md").read_text()
