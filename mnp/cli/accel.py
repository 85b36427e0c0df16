"""How a run uses its device: ``accel`` in conf/train.yaml (docs/gpu.md). None of it changes the math
beyond float rounding.

* ``cuda_graph``: MNP replays its training step and DCM update as CUDA graphs (:mod:`mnp.model.step_graphs`);
  ``auto`` (the default) does so for MNP on one CUDA device when nothing blocks the capture
  (:func:`mnp.model.step_graphs.blockers`) and trains eagerly otherwise, saying why in one line; ``true``
  refuses to train when it cannot capture; ``emulate`` runs the same bookkeeping without graphs, to check
  the path on a CPU;
* ``matmul_precision``: :func:`torch.set_float32_matmul_precision` for the run (``high``: TF32 on
  Ampere and later GPUs), restored afterwards, so one process's sweep jobs do not inherit it;
* ``check_finite_every``: steps between reads of the non-finite-loss flag; ``auto`` is 1 on a CPU
  and 50 on a GPU, where each read waits for the device.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping

import torch

from mnp.runs.summary import step_text

log = logging.getLogger(__name__)

PRECISIONS = ("highest", "high", "medium")
CUDA_GRAPH = (False, True, "emulate", "auto")
GPU_FINITE_EVERY = 50
# accel/step in metrics.json: which training step ran
STEPS = {True: "cuda_graph", "emulate": "cuda_graph_emulated", False: "eager"}


def finite_every(value, device: torch.device) -> int:
    """``check_finite_every`` on ``device``: ``auto`` is 1 on a CPU, :data:`GPU_FINITE_EVERY` elsewhere."""
    if value == "auto":
        return 1 if device.type == "cpu" else GPU_FINITE_EVERY
    return int(value)


def resolve_graph(model, value, trainer) -> tuple[bool | str, str]:
    """What ``accel.cuda_graph=value`` means for ``model`` under ``trainer``: (the model's ``cuda_graph``, why
    its step trains eagerly, "" when it does not). ``auto``: a graph for MNP on one CUDA device when
    nothing blocks the capture, else eager with the blockers; other values as given, refused in one
    line when they cannot apply (before anything trains)."""
    if value == "auto":
        device = trainer.strategy.root_device
        if device.type != "cuda":
            return False, f"the trainer runs on {device.type}, not on a CUDA device"
        if not hasattr(model, "capture_blockers"):
            return False, f"CUDA graphs capture MNP's step only, not {type(model).__name__}'s"
        reasons = model.capture_blockers(True, trainer)
        return (False, "; ".join(reasons)) if reasons else (True, "")
    if not value:
        return False, "accel.cuda_graph=false"
    if not hasattr(model, "capture_blockers"):
        raise ValueError(
            f"accel.cuda_graph applies to MNP only; {type(model).__name__} trains eagerly (drop accel.cuda_graph)"
        )
    if reasons := model.capture_blockers(value, trainer):
        raise ValueError("accel.cuda_graph cannot capture this model's step: " + "; ".join(reasons))
    return value, ""


def configure(model, accel: Mapping | None, trainer) -> dict[str, str]:
    """Give ``model`` the run's finite-check period and CUDA-graph switch (:func:`resolve_graph`); returns
    which training step runs, as metrics.json records it (``accel/step``, and ``accel/eager_reason``)."""
    accel, device = accel or {}, trainer.strategy.root_device
    model.check_finite_every = finite_every(accel.get("check_finite_every", "auto"), device)
    value = accel.get("cuda_graph", "auto")
    graph, reason = resolve_graph(model, value, trainer)
    if graph:
        model.cuda_graph = graph
    step = {"accel/step": STEPS[graph], **({"accel/eager_reason": reason} if reason else {})}
    if value == "auto":
        log.info("training step: %s", step_text(step))
    return step


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
