"""How a run uses its device: ``accel`` in conf/train.yaml (docs/gpu.md). None of it changes the math
beyond float rounding.

* ``cuda_graph``: MNP replays its training step and DCM update as CUDA graphs (:mod:`mnp.step_graphs`);
  ``emulate`` runs the same bookkeeping without graphs, to check the path on a CPU;
* ``matmul_precision``: :func:`torch.set_float32_matmul_precision` for the run (``high``: TF32 on
  Ampere and later GPUs), restored afterwards, so one process's sweep jobs do not inherit it;
* ``check_finite_every``: steps between reads of the non-finite-loss flag; ``auto`` is 1 on a CPU
  and 50 on a GPU, where each read waits for the device.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

import torch

PRECISIONS = ("highest", "high", "medium")
CUDA_GRAPH = (False, True, "emulate")
GPU_FINITE_EVERY = 50


def finite_every(value, device: torch.device) -> int:
    """``check_finite_every`` on ``device``: ``auto`` is 1 on a CPU, :data:`GPU_FINITE_EVERY` elsewhere."""
    if value == "auto":
        return 1 if device.type == "cpu" else GPU_FINITE_EVERY
    return int(value)


def configure(model, accel: Mapping | None, trainer) -> None:
    """Give ``model`` the run's finite-check period and CUDA-graph switch; fail in one line when the switch
    cannot apply to this model and trainer (before anything trains)."""
    accel, device = accel or {}, trainer.strategy.root_device
    model.check_finite_every = finite_every(accel.get("check_finite_every", "auto"), device)
    graph = accel.get("cuda_graph", False)
    if not graph:
        return
    if not hasattr(model, "capture_blockers"):
        raise ValueError(f"accel.cuda_graph applies to MNP only; {type(model).__name__} trains eagerly "
                         "(drop accel.cuda_graph)")
    if reasons := model.capture_blockers(graph, trainer):
        raise ValueError("accel.cuda_graph cannot capture this model's step: " + "; ".join(reasons))
    model.cuda_graph = graph


@contextlib.contextmanager
def matmul_precision(value: str | None) -> Iterator[None]:
    """Run the block with float32 matmuls at ``value`` (None: unchanged)."""
    before = torch.get_float32_matmul_precision()
    if value is not None:
        torch.set_float32_matmul_precision(value)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
