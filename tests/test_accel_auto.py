"""``accel.cuda_graph: auto`` (the default): MNP's step as CUDA graphs on one CUDA device when nothing blocks
the capture, eager elsewhere with one line saying why; which step ran is in the summary and metrics.json."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from mnp_utils import flat_mnp

from mnp.cli import accel
from mnp.runs.dirname import run_suffix
from mnp.runs.rundir import config_drift
from mnp.runs.summary import run_summary

DIMS = (5, 7, 4)


def mnp(**kw):
    return flat_mnp(num_classes=3, view_dims=list(DIMS), d_e=8, memory_size=6, projection="linear", **kw)


def trainer(device="cpu", world_size=1, precision="32-true"):
    return SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device(device)), world_size=world_size, precision=precision
    )


def test_auto_is_the_default_and_trains_eagerly_on_a_cpu_saying_why_in_one_line(caplog):
    from cfg_utils import compose_train

    assert compose_train("/nonexistent/x", []).accel.cuda_graph == "auto"
    model = mnp()
    with caplog.at_level(logging.INFO, logger="mnp.cli.accel"):
        step = accel.configure(model, {"cuda_graph": "auto"}, trainer("cpu"))
    assert step == {"accel/step": "eager", "accel/eager_reason": "the trainer runs on cpu, not on a CUDA device"}
    assert model.cuda_graph is False
    assert [r.getMessage() for r in caplog.records] == [
        "training step: eager (the trainer runs on cpu, not on a CUDA device)"
    ]


def test_auto_captures_mnp_on_one_cuda_device_when_nothing_blocks_it(caplog):
    model = mnp()
    with caplog.at_level(logging.INFO, logger="mnp.cli.accel"):
        step = accel.configure(model, {}, trainer("cuda"))  # the key left out: auto
    assert step == {"accel/step": "cuda_graph"} and model.cuda_graph is True
    assert [r.getMessage() for r in caplog.records] == ["training step: CUDA graph"]


@pytest.mark.parametrize(
    "model_kw, trainer_kw, blocker",
    [
        ({"memory_update": "random"}, {}, "model.memory.update=random"),
        ({"fast": False}, {}, "model.fast=false"),
        ({"optim": {"lr": 1e-3, "eps_placement": "keras"}}, {}, "eps_placement=keras"),
        ({}, {"world_size": 2}, "2 processes"),
        ({}, {"precision": "bf16-mixed"}, "trainer.precision=bf16-mixed"),
    ],
)
def test_auto_trains_eagerly_on_cuda_and_names_the_blocker(model_kw, trainer_kw, blocker):
    model = mnp(**model_kw)
    step = accel.configure(model, {"cuda_graph": "auto"}, trainer("cuda", **trainer_kw))
    assert step["accel/step"] == "eager" and blocker in step["accel/eager_reason"]
    assert model.cuda_graph is False


def test_auto_leaves_a_baseline_eager_and_true_or_false_keep_their_meaning():
    from baselines.mlp import MLP

    step = accel.configure(MLP(3, list(DIMS)), {"cuda_graph": "auto"}, trainer("cuda"))
    assert step == {"accel/step": "eager", "accel/eager_reason": "CUDA graphs capture MNP's step only, not MLP's"}
    assert accel.configure(mnp(), {"cuda_graph": False}, trainer("cuda")) == {
        "accel/step": "eager",
        "accel/eager_reason": "accel.cuda_graph=false",
    }
    with pytest.raises(ValueError, match="needs a CUDA device, but the trainer runs on cpu") as err:
        accel.configure(mnp(), {"cuda_graph": True}, trainer("cpu"))  # true stays strict
    assert "\n" not in str(err.value)
    assert accel.configure(mnp(), {"cuda_graph": "emulate"}, trainer("cpu")) == {"accel/step": "cuda_graph_emulated"}


def test_the_summary_says_which_training_step_ran(tmp_path):
    base = {"model": "mnp", "dataset": "pie", "seed": 0, "time/total_s": 3.0}
    text = run_summary({**base, "accel/step": "cuda_graph"}, tmp_path)
    assert "  training step  CUDA graph" in text.splitlines()
    text = run_summary({**base, "accel/step": "eager", "accel/eager_reason": "model.fast=false (x)"}, tmp_path)
    assert "  training step  eager (model.fast=false (x))" in text.splitlines()


def test_the_graph_switch_does_not_change_the_run_directory():
    """A finished run of accel.cuda_graph=false is the same run under the default auto: it is skipped, not
    refused, and an explicit accel.cuda_graph=true does not rename the directory."""
    saved = {"model": {"tau": 0.1}, "accel": {"cuda_graph": False, "matmul_precision": "highest"}}
    assert (
        config_drift(saved, {"model": {"tau": 0.1}, "accel": {"cuda_graph": "auto", "matmul_precision": "highest"}})
        == []
    )
    assert config_drift(saved, {"model": {"tau": 0.1}, "accel": {"cuda_graph": True, "matmul_precision": "high"}}) == [
        "accel.matmul_precision"
    ]  # TF32 changes the numbers
    assert run_suffix(["model=mnp", "accel.cuda_graph=true"]) == ""
