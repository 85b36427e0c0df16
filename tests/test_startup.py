"""Start-up and teardown: a run imports only what it uses, and metrics.json and the summary say how long it
took to reach its first training step and to write its outputs (mnp.cli.startup, benchmarks/startup.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cfg_utils import ROOT

from mnp.runs.summary import run_summary

RUN = """
import json, sys
sys.path[:0] = [{root!r}, {tests!r}]
from cfg_utils import compose_train
from mnp.cli.pipeline import train
results = train(compose_train({out!r}, ["model=mnp", "trainer.max_epochs=2", "model.warmup.epochs=1",
                                       "eval.noise=false", "callbacks.checkpoint.every_n_epochs=0"]))
print(json.dumps({{"modules": sorted(sys.modules), "results": {{k: v for k, v in results.items()
                                                             if k.startswith(("time/", "accel/"))}}}}))
"""


def modules_after(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, MNP_TORCH_THREADS="1"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_an_mnp_run_without_a_logger_imports_no_gpytorch_wandb_or_plotting(tmp_path):
    """gpytorch is MGP's, wandb the wandb logger's, matplotlib the figures' (mnp.eval.figures, report plots):
    a model=mnp logger=none run loads none of them. torchmetrics, which Lightning imports for its version
    check, loads matplotlib's pyplot on its own; the run may load no matplotlib module beyond those."""
    run = modules_after(RUN.format(root=str(ROOT), tests=str(ROOT / "tests"), out=str(tmp_path)))
    lightning = set(modules_after("import json, sys, pytorch_lightning; print(json.dumps(sorted(sys.modules)))"))
    loaded = set(run["modules"])
    assert not {m for m in loaded if m.split(".")[0] in ("gpytorch", "wandb")}
    assert not loaded & {
        "mnp.eval.figures",
        "mnp.tools.report.plots",
        "baselines.mgp",
    }  # wandb_utils imports wandb lazily
    assert {m for m in loaded if m.split(".")[0] == "matplotlib"} <= lightning
    res = run["results"]
    assert 0 < res["time/startup_s"] < res["time/total_s"]  # train() called from Python: from its own start
    assert 0 <= res["time/teardown_s"] < 5
    assert res["accel/step"] == "eager" and "not on a CUDA device" in res["accel/eager_reason"]


@pytest.mark.slow
def test_process_start_is_when_the_process_started_not_when_the_module_was_imported():
    code = (
        "import time; time.sleep(1.0); from mnp.cli.startup import process_start; print(time.time() - process_start())"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert 1.0 - 0.05 <= float(out.stdout.strip()) < 120


def test_the_summary_shows_start_up_and_teardown(tmp_path):
    text = run_summary(
        {
            "model": "mnp",
            "dataset": "pie",
            "seed": 0,
            "time/total_s": 9.0,
            "time/startup_s": 4.26,
            "time/teardown_s": 0.031,
        },
        tmp_path,
    ).splitlines()
    assert "  start-up    4.3 s (to the first training step)" in text
    assert "  teardown    0.03 s (test end to outputs written)" in text
