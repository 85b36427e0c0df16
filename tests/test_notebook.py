"""docs/examples/quickstart.ipynb runs from a clean kernel: it trains on a scikit-learn dataset, loads the run, draws
the reliability diagram and the noise curve, and cross-validates the estimator."""

from __future__ import annotations

import shutil

import nbformat
import pytest
from cfg_utils import ROOT
from nbclient import NotebookClient

NOTEBOOK = ROOT / "docs" / "examples" / "quickstart.ipynb"


@pytest.mark.slow
def test_the_example_notebook_runs_and_draws_its_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("MNP_TORCH_THREADS", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    here = tmp_path / "docs" / "examples"  # the notebook finds the repository two folders up
    here.mkdir(parents=True)
    for name in ("train.py", "conf", "mnp", "datamodules", "baselines"):
        src = ROOT / name
        (here.parents[1] / name).symlink_to(src, target_is_directory=src.is_dir())
    shutil.copy(NOTEBOOK, here / NOTEBOOK.name)
    nb = nbformat.read(here / NOTEBOOK.name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(here)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2  # the reliability diagram and the noise curve
    text = "".join(o.get("text", "") for o in outputs)
    for model in ("mnp", "mlp"):
        accuracy = float(text.split(f"{model}: accuracy ")[1].split()[0])
        assert accuracy > 0.5  # ten classes: chance is 0.1


def test_the_committed_notebook_holds_its_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    outputs = [o for c in code for o in c.outputs]
    rerun = "run: jupyter execute --inplace docs/examples/quickstart.ipynb"
    assert all(c.execution_count for c in code) and sum("image/png" in o.get("data", {}) for o in outputs) == 2, rerun
    assert not [o for o in outputs if o.output_type == "error"]
