"""Your own data with the defaults: `python train.py dataset=custom dataset.path=<file>` with the default
model (mnp) lands within 3 accuracy points of the default mlp, on three generated tabular sets of
different shapes (2, 4 and 6 views) and on scikit-learn's digits split into two views."""
import sys

import numpy as np
import pytest

from cfg_utils import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from custom_defaults import DATASETS, run  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DATASETS))
def test_default_mnp_is_within_3_points_of_default_mlp(tmp_path, name):
    path = tmp_path / f"{name}.npz"
    np.savez(path, **DATASETS[name]())
    acc = {m: run(m, path, tmp_path / m, ("eval.noise=false",))["acc"] for m in ("mnp", "mlp")}
    assert acc["mnp"] >= acc["mlp"] - 0.03, acc
    assert acc["mnp"] > 1.5 / len(np.unique(DATASETS[name]()["y"]))  # well beyond chance
